"""DELIVER: numbers, tables and figures generated from the immutable runs, with provenance.

Contract shared by the modules here:

* A **reference** names one value of one run's ``results.json``: ``"<source>:<key.path>"``, where
  source is a run id, a run folder, or a job name (its newest pulled run), and ``key.path`` is a
  dotted path into results.json (``test.accuracy``). A claim of ``EVIDENCE.json`` is referenced
  by its id (``"C1"``, its first evidence row) or ``"C1#k"`` (row k).
* A **generated number** (:class:`.numbers.GeneratedNumber`) has ``value`` (the raw value),
  ``text`` (formatted), ``ref``, ``run_id``, ``results_json`` (path), ``sha256`` (of that file's
  bytes), ``key``, ``fmt`` and ``claim_id``; ``source()`` gives those fields as a dict.
* Every output rgt generates carries them in its display metadata:
  ``metadata["rgt_jupyter"]["generated"] = [source(), ...]``.
* A markdown **placeholder** ``{{rgt:<ref>|<fmt>}}`` is rendered at delivery/export; the source
  keeps the placeholder.
"""

from __future__ import annotations
