"use strict";(self.rspackChunkrgt_jupyter=self.rspackChunkrgt_jupyter||[]).push([[266],{646(r,o,e){var t=e(601),n=e.n(t),a=e(314),i=(e.n(a))()(n());i.push([r.id,`/* The rgt jobs sidebar and the rendered placeholders: JupyterLab's theme variables only, so light
   and dark themes (and high contrast) are followed. */
.rgt-jobs {
  background: var(--jp-layout-color1);
  color: var(--jp-ui-font-color1);
  font-family: var(--jp-ui-font-family);
  font-size: var(--jp-ui-font-size1);
  display: flex;
  flex-direction: column;
  min-width: 220px;
}
.rgt-jobs-head {
  padding: 8px 10px 6px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
}
.rgt-jobs-title {
  font-weight: 600;
  text-transform: uppercase;
  font-size: var(--jp-ui-font-size0);
  letter-spacing: 0.05em;
  color: var(--jp-ui-font-color1);
}
.rgt-jobs-project,
.rgt-jobs-watcher {
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
}
.rgt-jobs-error {
  color: var(--jp-error-color1);
  font-size: var(--jp-ui-font-size0);
  margin-top: 4px;
}
.rgt-jobs-list {
  overflow-y: auto;
  flex: 1 1 auto;
}
.rgt-jobs-empty {
  padding: 10px;
  color: var(--jp-ui-font-color2);
}
.rgt-jobs-row {
  padding: 6px 10px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color3);
  cursor: pointer;
}
.rgt-jobs-row:hover,
.rgt-jobs-row:focus {
  background: var(--jp-layout-color2);
  outline: none;
}
.rgt-jobs-row-top {
  display: flex;
  gap: 6px;
  align-items: baseline;
}
.rgt-jobs-row-name {
  font-weight: 600;
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
}
.rgt-jobs-row-state {
  font-size: var(--jp-ui-font-size0);
  padding: 0 5px;
  border-radius: 3px;
  color: var(--jp-ui-inverse-font-color1);
  flex: none;
}
.rgt-jobs-row-bar {
  height: 4px;
  margin: 4px 0 3px;
  background: var(--jp-layout-color3);
  border-radius: 2px;
  overflow: hidden;
}
.rgt-jobs-row-fill {
  height: 100%;
}
.rgt-jobs-row-facts,
.rgt-jobs-row-note {
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
}
.rgt-kind-success { background: var(--jp-success-color1); }
.rgt-kind-active { background: var(--jp-brand-color1); }
.rgt-kind-waiting { background: var(--jp-inverse-layout-color3); }
.rgt-kind-warn { background: var(--jp-warn-color1); }
.rgt-kind-danger { background: var(--jp-error-color1); }
.rgt-kind-muted { background: var(--jp-inverse-layout-color4); }
.rgt-launching-cell {
  box-shadow: inset 3px 0 0 var(--jp-brand-color1);
}
.rgt-placeholder-number {
  border-bottom: 1px dotted var(--jp-brand-color1);
}
.rgt-placeholder-pending {
  color: var(--jp-ui-font-color2);
}
.rgt-placeholder-error {
  color: var(--jp-error-color1);
  border-bottom: 1px dashed var(--jp-error-color1);
}
`,""]),e.d(o,{},{A:i})},314(r){r.exports=function(r){var o=[];return o.toString=function(){return this.map(function(o){var e="",t=void 0!==o[5];return o[4]&&(e+="@supports (".concat(o[4],") {")),o[2]&&(e+="@media ".concat(o[2]," {")),t&&(e+="@layer".concat(o[5].length>0?" ".concat(o[5]):""," {")),e+=r(o),t&&(e+="}"),o[2]&&(e+="}"),o[4]&&(e+="}"),e}).join("")},o.i=function(r,e,t,n,a){"string"==typeof r&&(r=[[null,r,void 0]]);var i={};if(t)for(var s=0;s<this.length;s++){var c=this[s][0];null!=c&&(i[c]=!0)}for(var l=0;l<r.length;l++){var p=[].concat(r[l]);t&&i[p[0]]||(void 0!==a&&(void 0===p[5]||(p[1]="@layer".concat(p[5].length>0?" ".concat(p[5]):""," {").concat(p[1],"}")),p[5]=a),e&&(p[2]&&(p[1]="@media ".concat(p[2]," {").concat(p[1],"}")),p[2]=e),n&&(p[4]?(p[1]="@supports (".concat(p[4],") {").concat(p[1],"}"),p[4]=n):p[4]="".concat(n)),o.push(p))}},o}},601(r){r.exports=function(r){return r[1]}},665(r,o,e){e.r(o);var t=e(72),n=e.n(t),a=e(825),i=e.n(a),s=e(659),c=e.n(s),l=e(56),p=e.n(l),d=e(540),u=e.n(d),f=e(113),v=e.n(f),g=e(646),b={};b.styleTagTransform=v(),b.setAttributes=p(),b.insert=c().bind(null,"head"),b.domAPI=i(),b.insertStyleElement=u(),n()(g.A,b);let h=g.A&&g.A.locals?g.A.locals:void 0;e.d(o,{},{default:h})},72(r){var o=[];function e(r){for(var e=-1,t=0;t<o.length;t++)if(o[t].identifier===r){e=t;break}return e}function t(r,t){for(var n={},a=[],i=0;i<r.length;i++){var s=r[i],c=t.base?s[0]+t.base:s[0],l=n[c]||0,p="".concat(c," ").concat(l);n[c]=l+1;var d=e(p),u={css:s[1],media:s[2],sourceMap:s[3],supports:s[4],layer:s[5]};if(-1!==d)o[d].references++,o[d].updater(u);else{var f=function(r,o){var e=o.domAPI(o);return e.update(r),function(o){o?(o.css!==r.css||o.media!==r.media||o.sourceMap!==r.sourceMap||o.supports!==r.supports||o.layer!==r.layer)&&e.update(r=o):e.remove()}}(u,t);t.byIndex=i,o.splice(i,0,{identifier:p,updater:f,references:1})}a.push(p)}return a}r.exports=function(r,n){var a=t(r=r||[],n=n||{});return function(r){r=r||[];for(var i=0;i<a.length;i++){var s=e(a[i]);o[s].references--}for(var c=t(r,n),l=0;l<a.length;l++){var p=e(a[l]);0===o[p].references&&(o[p].updater(),o.splice(p,1))}a=c}}},659(r){var o={};r.exports=function(r,e){var t=function(r){if(void 0===o[r]){var e=document.querySelector(r);if(window.HTMLIFrameElement&&e instanceof window.HTMLIFrameElement)try{e=e.contentDocument.head}catch(r){e=null}o[r]=e}return o[r]}(r);if(!t)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");t.appendChild(e)}},540(r){r.exports=function(r){var o=document.createElement("style");return r.setAttributes(o,r.attributes),r.insert(o,r.options),o}},56(r,o,e){r.exports=function(r){var o=e.nc;o&&r.setAttribute("nonce",o)}},825(r){r.exports=function(r){if("u"<typeof document)return{update:function(){},remove:function(){}};var o=r.insertStyleElement(r);return{update:function(e){var t,n,a;t="",e.supports&&(t+="@supports (".concat(e.supports,") {")),e.media&&(t+="@media ".concat(e.media," {")),(n=void 0!==e.layer)&&(t+="@layer".concat(e.layer.length>0?" ".concat(e.layer):""," {")),t+=e.css,n&&(t+="}"),e.media&&(t+="}"),e.supports&&(t+="}"),(a=e.sourceMap)&&"u">typeof btoa&&(t+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),r.styleTagTransform(t,o,r.options)},remove:function(){var r;null===(r=o).parentNode||r.parentNode.removeChild(r)}}}},113(r){r.exports=function(r,o){if(o.styleSheet)o.styleSheet.cssText=r;else{for(;o.firstChild;)o.removeChild(o.firstChild);o.appendChild(document.createTextNode(r))}}}}]);