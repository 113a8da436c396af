// rgt-jupyter's JupyterLab extension (also loaded by Notebook 7).
//
// * The "rgt jobs" sidebar: every job of the project the Jupyter server watches, read from the
//   server extension's read-only REST API (GET rgt/api/jobs), which the server-side watcher keeps
//   current. Each row shows the state, progress, host and age; a click opens the notebook that
//   launched the job at its cell. It changes nothing: the API has no verb that does.
// * Markdown placeholders {{rgt:<ref>|<fmt>}} shown as their numbers while the author writes
//   (GET rgt/api/number); the cell's source keeps the placeholder, so the notebook stays the
//   template that `%deliver` and the nbconvert preprocessor render. A placeholder that does not
//   resolve stays as written, marked, with the reason in its tooltip.

import { ServerConnection } from '@jupyterlab/services';
import { URLExt } from '@jupyterlab/coreutils';
import { Widget } from '@lumino/widgets';

const POLL_MS = 2000;
const HIDDEN_POLL_MS = 10000;
const NUMBER_TTL_MS = 5000;
// The same syntax as rgt_jupyter.deliver.numbers.PLACEHOLDER.
const PLACEHOLDER = /\{\{\s*rgt:([^{}|]+?)\s*(?:\|([^{}]*))?\}\}/g;

const STATE_KIND = {
  finished: 'success',
  running: 'active',
  queued: 'waiting',
  preempted: 'warn',
  stalled: 'warn',
  lost: 'danger',
  failed: 'danger',
  killed: 'danger',
  cancelled: 'muted'
};

async function getJSON(path) {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, path);
  const response = await ServerConnection.makeRequest(url, {}, settings);
  let body = null;
  try {
    body = await response.json();
  } catch (err) {
    body = null;
  }
  if (!response.ok) {
    const why = (body && body.message) || `${response.status} ${response.statusText}`;
    const error = new Error(why);
    error.status = response.status;
    throw error;
  }
  return body;
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined && text !== null) {
    node.textContent = String(text);
  }
  return node;
}

/** Seconds as a short age: "12 s", "5 min", "3 h", "2 d". */
export function age(seconds) {
  if (typeof seconds !== 'number' || !isFinite(seconds)) {
    return '';
  }
  const s = Math.max(0, seconds);
  if (s < 60) {
    return `${Math.round(s)} s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)} min`;
  }
  if (s < 86400) {
    return `${Math.floor(s / 3600)} h`;
  }
  return `${Math.floor(s / 86400)} d`;
}

/** A job's progress as text and a fraction (null when it has no total). */
export function progressOf(job) {
  const p = job.progress || null;
  if (!p || typeof p !== 'object') {
    return { text: job.state === 'finished' ? 'done' : 'no progress yet', fraction: null };
  }
  const step = typeof p.step === 'number' ? p.step : null;
  const total = typeof p.total === 'number' && p.total > 0 ? p.total : null;
  if (step !== null && total !== null) {
    const frac = Math.min(Math.max(step / total, 0), 1);
    return { text: `${step}/${total} (${Math.round(frac * 100)}%)`, fraction: frac };
  }
  if (step !== null) {
    return { text: `step ${step}`, fraction: null };
  }
  return { text: 'no progress yet', fraction: null };
}

class JobsPanel extends Widget {
  constructor(app) {
    super();
    this.app = app;
    this.id = 'rgt-jobs';
    this.addClass('rgt-jobs');
    this.title.label = 'rgt jobs';
    this.title.caption = 'rgt jobs: every job of this project, kept current by the server';
    this.timer = null;
    this.stopped = false;
    this.last = null;

    const head = el('div', 'rgt-jobs-head');
    head.appendChild(el('div', 'rgt-jobs-title', 'rgt jobs'));
    this.projectLine = el('div', 'rgt-jobs-project', '');
    this.watcherLine = el('div', 'rgt-jobs-watcher', 'reading the jobs…');
    this.errorLine = el('div', 'rgt-jobs-error', '');
    this.errorLine.hidden = true;
    head.appendChild(this.projectLine);
    head.appendChild(this.watcherLine);
    head.appendChild(this.errorLine);
    this.list = el('div', 'rgt-jobs-list');
    this.node.appendChild(head);
    this.node.appendChild(this.list);
  }

  onAfterShow() {
    this.refresh();
  }

  dispose() {
    this.stopped = true;
    if (this.timer) {
      clearTimeout(this.timer);
    }
    super.dispose();
  }

  schedule() {
    if (this.stopped) {
      return;
    }
    if (this.timer) {
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => this.refresh(), this.isVisible ? POLL_MS : HIDDEN_POLL_MS);
  }

  async refresh() {
    try {
      const payload = await getJSON('rgt/api/jobs');
      this.errorLine.hidden = true;
      this.render(payload);
    } catch (err) {
      this.errorLine.hidden = false;
      this.errorLine.textContent =
        err.status === 404
          ? 'the rgt server extension is not loaded in this Jupyter server: ' +
            'install rgt-jupyter in the environment the server runs in, then restart it'
          : `cannot read the jobs: ${err.message}`;
    }
    this.schedule();
  }

  render(payload) {
    this.last = payload;
    this.projectLine.textContent = payload.project || '';
    this.projectLine.title = payload.project || '';
    const w = payload.watcher || {};
    this.watcherLine.textContent = w.liveness || `server watcher: ${w.status || 'unknown'}`;
    this.watcherLine.title = this.watcherLine.textContent;
    const jobs = (payload.jobs || []).slice().reverse(); // newest first
    const now = Date.now() / 1000;
    this.list.replaceChildren();
    if (jobs.length === 0) {
      this.list.appendChild(
        el('div', 'rgt-jobs-empty', 'No jobs yet: launch one with %%remote_run or rgt run.')
      );
      return;
    }
    for (const job of jobs) {
      this.list.appendChild(this.row(job, now));
    }
  }

  row(job, now) {
    const state = job.display_state || job.state || 'unknown';
    const row = el('div', 'rgt-jobs-row');
    row.dataset.jobId = job.id;
    row.dataset.state = state;
    row.tabIndex = 0;
    row.setAttribute('role', 'button');

    const top = el('div', 'rgt-jobs-row-top');
    const badge = el('span', `rgt-jobs-row-state rgt-kind-${STATE_KIND[state] || 'muted'}`, state);
    top.appendChild(badge);
    const name = el('span', 'rgt-jobs-row-name', job.name);
    name.title = job.id;
    top.appendChild(name);
    row.appendChild(top);

    const prog = progressOf(job);
    const bar = el('div', 'rgt-jobs-row-bar');
    const fill = el('div', `rgt-jobs-row-fill rgt-kind-${STATE_KIND[state] || 'muted'}`);
    fill.style.width = prog.fraction === null ? '0%' : `${(prog.fraction * 100).toFixed(1)}%`;
    if (prog.fraction === null && state === 'finished') {
      fill.style.width = '100%';
    }
    bar.appendChild(fill);
    row.appendChild(bar);

    const where =
      job.profile === 'local' ? `this machine (${job.host || 'local'})` : job.host || job.profile;
    const facts = [prog.text, where, `started ${age(now - job.created_at)} ago`];
    row.appendChild(el('div', 'rgt-jobs-row-facts', facts.join(' · ')));
    if (job.watcher_note) {
      row.appendChild(el('div', 'rgt-jobs-row-note', job.watcher_note));
    }
    row.title = job.notebook
      ? `${job.id}: open ${job.notebook} at the cell that launched it`
      : `${job.id}: launched outside a notebook (${job.profile})`;
    const open = () => this.open(job);
    row.addEventListener('click', open);
    row.addEventListener('keydown', ev => {
      if (ev.key === 'Enter' || ev.key === ' ') {
        ev.preventDefault();
        open();
      }
    });
    return row;
  }

  async open(job) {
    if (!job.notebook) {
      this.flash(`${job.name} was launched outside a notebook (rgt run): nothing to open`);
      return;
    }
    let panel;
    try {
      panel = await this.app.commands.execute('docmanager:open', { path: job.notebook });
    } catch (err) {
      this.flash(`cannot open ${job.notebook}: ${err.message || err}`);
      return;
    }
    if (!panel || !panel.content || !panel.context) {
      return;
    }
    await panel.context.ready;
    if (panel.revealed) {
      await panel.revealed;
    }
    const notebook = panel.content;
    const cells = notebook.widgets || [];
    let index = cells.findIndex(c => c.model && c.model.id === job.cell_id);
    if (index < 0) {
      // A frontend that sent no cell id: the cell whose text names the job.
      index = cells.findIndex(c => {
        const text = c.model.sharedModel.getSource();
        return text.startsWith('%%remote_run') && text.includes(`--name ${job.name}`);
      });
    }
    if (index < 0) {
      this.flash(`${job.notebook} no longer has the cell that launched ${job.name}`);
      return;
    }
    notebook.activeCellIndex = index;
    if (typeof notebook.scrollToItem === 'function') {
      await notebook.scrollToItem(index, 'center');
    } else {
      cells[index].node.scrollIntoView({ block: 'center' });
    }
    const node = cells[index].node;
    node.classList.add('rgt-launching-cell');
    setTimeout(() => node.classList.remove('rgt-launching-cell'), 4000);
  }

  flash(text) {
    this.errorLine.hidden = false;
    this.errorLine.textContent = text;
  }
}

const jobsPlugin = {
  id: 'rgt-jupyter:jobs',
  description: 'The rgt jobs sidebar.',
  autoStart: true,
  activate: app => {
    const panel = new JobsPanel(app);
    app.shell.add(panel, 'left', { rank: 900 });
    panel.refresh();
    app.commands.addCommand('rgt-jupyter:show-jobs', {
      label: 'Show rgt jobs',
      execute: () => app.shell.activateById(panel.id)
    });
    return panel;
  }
};

// -- markdown placeholders

const numbers = new Map(); // "ref|fmt" -> {at, promise}

function lookup(ref, fmt) {
  const key = `${ref}|${fmt || ''}`;
  const hit = numbers.get(key);
  if (hit && Date.now() - hit.at < NUMBER_TTL_MS) {
    return hit.promise;
  }
  const query = `ref=${encodeURIComponent(ref)}` + (fmt ? `&fmt=${encodeURIComponent(fmt)}` : '');
  const promise = getJSON(`rgt/api/number?${query}`).then(
    body => ({ ok: true, body }),
    err => ({ ok: false, message: err.message })
  );
  numbers.set(key, { at: Date.now(), promise });
  return promise;
}

function sourceText(source) {
  if (!source) {
    return '';
  }
  const parts = [`run ${source.run_id}`, `key ${source.key}`];
  if (source.results_json) {
    parts.push(source.results_json);
  }
  if (source.sha256) {
    parts.push(`sha256 ${String(source.sha256).slice(0, 12)}…`);
  }
  return parts.join(', ');
}

/** Replace the placeholders in the text nodes of one rendered markdown node (code excluded). */
function renderPlaceholders(root) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode: node =>
      node.parentElement && node.parentElement.closest('code, pre, .rgt-placeholder')
        ? NodeFilter.FILTER_REJECT
        : node.nodeValue.includes('{{')
          ? NodeFilter.FILTER_ACCEPT
          : NodeFilter.FILTER_SKIP
  });
  const found = [];
  while (walker.nextNode()) {
    found.push(walker.currentNode);
  }
  for (const node of found) {
    const text = node.nodeValue;
    PLACEHOLDER.lastIndex = 0;
    let match;
    let pos = 0;
    const pieces = [];
    while ((match = PLACEHOLDER.exec(text)) !== null) {
      pieces.push(document.createTextNode(text.slice(pos, match.index)));
      const ref = match[1].trim();
      const fmt = match[2] !== undefined ? match[2].trim() : '';
      const span = el('span', 'rgt-placeholder rgt-placeholder-pending', match[0]);
      span.dataset.rgtRef = ref;
      span.dataset.rgtFmt = fmt;
      span.dataset.rgtPlaceholder = match[0];
      span.title = `${match[0]}: reading the number…`;
      pieces.push(span);
      pos = match.index + match[0].length;
      lookup(ref, fmt).then(result => {
        span.classList.remove('rgt-placeholder-pending');
        if (result.ok) {
          span.textContent = result.body.text;
          span.classList.add('rgt-placeholder-number');
          span.title = `${span.dataset.rgtPlaceholder}: ${sourceText(result.body.source)}`;
        } else {
          span.classList.add('rgt-placeholder-error');
          span.title = `${span.dataset.rgtPlaceholder} does not resolve: ${result.message}`;
        }
      });
    }
    if (pieces.length === 0) {
      continue;
    }
    pieces.push(document.createTextNode(text.slice(pos)));
    const frag = document.createDocumentFragment();
    pieces.forEach(p => frag.appendChild(p));
    node.parentNode.replaceChild(frag, node);
  }
}

const placeholdersPlugin = {
  id: 'rgt-jupyter:placeholders',
  description: 'Markdown number placeholders shown as their numbers while the author writes.',
  autoStart: true,
  activate: () => {
    const pending = new Set();
    let queued = false;
    const flush = () => {
      queued = false;
      for (const node of pending) {
        if (node.isConnected) {
          renderPlaceholders(node);
        }
      }
      pending.clear();
    };
    const observer = new MutationObserver(records => {
      for (const record of records) {
        const target =
          record.target.nodeType === Node.ELEMENT_NODE ? record.target : record.target.parentElement;
        const md = target && target.closest ? target.closest('.jp-RenderedMarkdown') : null;
        if (md) {
          pending.add(md);
        }
        for (const added of record.addedNodes) {
          if (added.nodeType !== Node.ELEMENT_NODE) {
            continue;
          }
          if (added.matches('.jp-RenderedMarkdown')) {
            pending.add(added);
          }
          added.querySelectorAll('.jp-RenderedMarkdown').forEach(n => pending.add(n));
        }
      }
      if (pending.size && !queued) {
        queued = true;
        requestAnimationFrame(flush);
      }
    });
    observer.observe(document.body, { childList: true, subtree: true, characterData: true });
    document.querySelectorAll('.jp-RenderedMarkdown').forEach(n => renderPlaceholders(n));
  }
};

export default [jobsPlugin, placeholdersPlugin];
