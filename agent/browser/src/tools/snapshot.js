// The page model's walk (`pap.browser.snapshot`), called with `Runtime.callFunctionOn` in an
// isolated world of the tab's main frame (page_model.rs, WORLD). The page's own scripts share the
// DOM with it but not its globals, prototypes or expandos: what it keeps (the refs it gave) they
// can neither read nor forge, and what they patch (`Element.prototype.getAttribute`, say) it
// does not call.
//
// It writes the page as a model reads it, one line per element that means something: its role
// (ARIA's, or the one HTML gives its tag, named as Chromium's accessibility tree names it), its
// accessible name (aria-labelledby, aria-label, labels, alt, then content or title), its states,
// a ref per element a model acts on, and a field's value (a password's never). Wrappers without
// a role (`div`, `span`, `label`) add no line and no depth. Hidden content (display: none,
// visibility: hidden, aria-hidden, `hidden`) is left out. A same-origin frame's document goes
// under its element; a frame of another origin gets a line that says so, and the walk answers
// where it is (`frames`): page_model.rs walks that frame in a world of its own and puts what
// it wrote in that line's place.
//
// A ref is `e` and a number this world gives an element the first time a walk meets it: the
// same element keeps its number while its document lives, a number is never given twice in
// one document, and the numbers kept are bounded (`o.keep`, oldest first).
//
// `o`: { max: characters of text, depth: deepest line, nodes: most nodes visited,
//        chars: longest name or value, keep: refs kept, ms: longest walk in milliseconds,
//        base: the depth of its first lines (a frame's walk is indented under its element),
//        frame: what its refs start with ('' in the main frame, 'f2' in the page's second
//        frame of another origin) }.
//
// What the page controls (its markup, its attributes, its text) is never trusted to shape a
// line: a role is one ARIA defines, names, values and URLs are quoted, and an element whose
// reading throws (a custom element's getter, say) is left out, not the walk.
// Answers { text, refs, cut, title, frames }: `cut` lines did not fit (or were not visited);
// `frames` are the frames of another origin it met, each as { n: its element's number here,
// line: the index of the line that stands for its content }.
function (o) {
  'use strict';
  const st = globalThis.__papPageModel
    || (globalThis.__papPageModel = { ids: new WeakMap(), els: new Map(), next: 1 });

  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'TITLE', 'BASE']);
  // Roles a model acts on: each gets a ref (and so does anything focusable).
  const ACTIONABLE = new Set(['button', 'link', 'textbox', 'searchbox', 'checkbox', 'radio', 'combobox',
    'listbox', 'option', 'menuitem', 'menuitemcheckbox', 'menuitemradio', 'tab', 'switch', 'slider',
    'spinbutton', 'treeitem', 'iframe']);
  // Roles named by their content when nothing else names them (ARIA 1.2, "name from content").
  const FROM_CONTENT = new Set(['button', 'cell', 'checkbox', 'columnheader', 'gridcell', 'heading', 'link',
    'menuitem', 'menuitemcheckbox', 'menuitemradio', 'option', 'radio', 'row', 'rowheader', 'switch', 'tab',
    'tooltip', 'treeitem', 'term', 'caption']);
  // Roles whose value is what the person typed or chose.
  const VALUED = new Set(['textbox', 'searchbox', 'combobox', 'spinbutton', 'slider']);
  // Autofill fields whose values are secrets (HTML's autocomplete tokens).
  const SECRET = new Set(['current-password', 'new-password', 'one-time-code', 'cc-number', 'cc-csc']);
  // Roles that only group: a line of their own only when they carry a name.
  const GROUPING = new Set(['generic', 'none', 'presentation', 'rowgroup']);
  // The roles ARIA 1.2 (and its graphics module) defines: a `role` attribute's first of these
  // is the element's role; any other token is not a role and is never printed (a page would
  // write `[ref=e1]` into its own role).
  const ROLES = new Set(('alert alertdialog application article banner blockquote button caption cell checkbox '
    + 'code columnheader combobox comment complementary contentinfo definition deletion dialog directory '
    + 'document emphasis feed figure form generic graphics-document graphics-object graphics-symbol grid '
    + 'gridcell group heading image img insertion link list listbox listitem log main mark marquee math menu '
    + 'menubar menuitem menuitemcheckbox menuitemradio meter navigation none note option paragraph '
    + 'presentation progressbar radio radiogroup region row rowgroup rowheader scrollbar search searchbox '
    + 'separator slider spinbutton status strong subscript suggestion superscript switch tab table tablist '
    + 'tabpanel term textbox time timer toolbar tooltip tree treegrid treeitem').split(' '));
  const HTML = 'http://www.w3.org/1999/xhtml';
  const INPUT = {
    button: 'button', submit: 'button', reset: 'button', image: 'button', file: 'button',
    checkbox: 'checkbox', radio: 'radio', range: 'slider', number: 'spinbutton', hidden: '',
  };
  const TAG = {
    BUTTON: 'button', TEXTAREA: 'textbox', OPTION: 'option', NAV: 'navigation', MAIN: 'main',
    ASIDE: 'complementary', UL: 'list', OL: 'list', MENU: 'list', LI: 'listitem', P: 'paragraph',
    TABLE: 'table', TR: 'row', TD: 'cell', CAPTION: 'caption', THEAD: 'rowgroup', TBODY: 'rowgroup',
    TFOOT: 'rowgroup', DIALOG: 'dialog', DETAILS: 'group', SUMMARY: 'button', FIELDSET: 'group',
    ARTICLE: 'article', HR: 'separator', BLOCKQUOTE: 'blockquote', PROGRESS: 'progressbar',
    METER: 'meter', OUTPUT: 'status', FIGURE: 'figure', DL: 'list', DT: 'term', DD: 'definition',
    IFRAME: 'iframe', FRAME: 'iframe', SEARCH: 'search', CODE: 'code', MARK: 'mark', TIME: 'time',
  };
  const BLOCK = new Set(['DIV', 'P', 'LI', 'UL', 'OL', 'TD', 'TH', 'TR', 'H1', 'H2', 'H3', 'H4', 'H5', 'H6',
    'SECTION', 'ARTICLE', 'HEADER', 'FOOTER', 'NAV', 'MAIN', 'ASIDE', 'FORM', 'FIELDSET', 'TABLE', 'DD',
    'DT', 'DL', 'BLOCKQUOTE', 'PRE', 'FIGURE', 'FIGCAPTION', 'ADDRESS', 'DETAILS', 'SUMMARY', 'LEGEND']);

  let out = '';
  let cut = 0;
  let visited = 0;
  const refs = [];
  const frames = [];
  let lines = 0;
  const prefix = typeof o.frame === 'string' ? o.frame : '';
  const base = o.base || 0;
  const until = performance.now() + (o.ms || 2000);
  let late = false;

  // An element's tag as HTML names it (upper case) whatever the document (an XHTML page's
  // `tagName` is lower case); an element of another namespace (SVG, MathML) by its local name,
  // so no HTML rule (a SELECT's options, a SLOT's nodes) is applied to it.
  const tagOf = (el) => (el.namespaceURI === HTML ? el.localName.toUpperCase() : el.localName);
  // Whether `el`'s value is a secret: a password, or a field the page marks as one with
  // HTML's autofill tokens (a card's number or code, a one-time code). Neither its value nor
  // a name made of it is said back.
  const secret = (el) => {
    const tag = tagOf(el);
    if (tag !== 'INPUT' && tag !== 'TEXTAREA') return false;
    if (tag === 'INPUT' && (el.getAttribute('type') || '').toLowerCase() === 'password') return true;
    const autocomplete = (el.getAttribute('autocomplete') || '').toLowerCase().split(/\s+/);
    return autocomplete.some((token) => SECRET.has(token));
  };

  const oneLine = (s) => {
    // NEL (U+0085) is no space to JavaScript, but a line break to some readers.
    const t = String(s).replace(/[\s\u0085]+/g, ' ').trim();
    return t.length > o.chars ? t.slice(0, o.chars) + '\u2026' : t;
  };
  const quoted = (s) => JSON.stringify(s);
  // Whether a line of `length` characters at `depth` is written: none after the first that
  // did not fit, so the text ends where the cut is.
  const fits = (depth, length) => cut === 0 && out.length + length + 2 * (base + depth) + 3 <= o.max;
  const line = (depth, s) => {
    if (!fits(depth, s.length)) {
      cut += 1;
      return;
    }
    out += '  '.repeat(base + depth) + '- ' + s + '\n';
    lines += 1;
  };
  // The number `el` has, or would be given.
  const numberOf = (el) => {
    const id = st.ids.get(el);
    return id === undefined ? st.next : id;
  };
  // `el`'s ref, given when its line is written (and only then: a ref the text does not show
  // would push out of the bounded keep one it does).
  const refOf = (el) => {
    let id = st.ids.get(el);
    if (id === undefined) {
      id = st.next;
      st.next += 1;
      st.ids.set(el, id);
    }
    if (!st.els.has(id)) {
      st.els.set(id, el);
      if (st.els.size > o.keep) st.els.delete(st.els.keys().next().value);
    }
    refs.push(id);
    return id;
  };

  // Whether `el` is rendered at all (display: none here or above, or no box); `display:
  // contents` has no box of its own but shows its children, and a select's options are drawn
  // by the select.
  const rendered = (el) => {
    if (el.checkVisibility({ contentVisibilityAuto: false })) return true;
    if (tagOf(el) === 'OPTION' || tagOf(el) === 'OPTGROUP') return true;
    const style = el.ownerDocument.defaultView && el.ownerDocument.defaultView.getComputedStyle(el);
    return !!style && style.display === 'contents';
  };
  // Whether `el` itself is seen (visibility: hidden hides an element but not a child that sets
  // visibility: visible).
  const visible = (el) => tagOf(el) === 'OPTION' || tagOf(el) === 'OPTGROUP'
    || el.checkVisibility({ visibilityProperty: true, checkVisibilityCSS: true });

  // The nodes under `el` as they are shown: an open shadow root's, or a slot's assigned nodes.
  const kids = (el) => {
    if (el.shadowRoot) return el.shadowRoot.childNodes;
    if (tagOf(el) === 'SLOT') {
      const assigned = el.assignedNodes({ flatten: true });
      if (assigned.length > 0) return assigned;
    }
    return el.childNodes;
  };

  const roleOf = (el) => {
    const tag = tagOf(el);
    const explicit = (el.getAttribute('role') || '').toLowerCase().split(/\s+/).find((token) => ROLES.has(token));
    if (explicit && !((explicit === 'none' || explicit === 'presentation') && el.tabIndex >= 0)) {
      return explicit === 'img' ? 'image' : explicit;
    }
    switch (tag) {
      case 'A':
      case 'AREA':
        return el.hasAttribute('href') ? 'link' : 'generic';
      case 'INPUT': {
        const type = (el.getAttribute('type') || 'text').toLowerCase();
        // Own keys only: `constructor` or `toString` is no input type of HTML's.
        if (Object.hasOwn(INPUT, type)) return INPUT[type];
        if (type === 'search') return el.hasAttribute('list') ? 'combobox' : 'searchbox';
        return el.hasAttribute('list') ? 'combobox' : 'textbox';
      }
      case 'SELECT':
        return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
      case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6':
        return 'heading';
      case 'IMG':
        return el.getAttribute('alt') === '' && !el.hasAttribute('title') ? 'none' : 'image';
      case 'svg':
        return 'image';
      case 'TH':
        return el.getAttribute('scope') === 'row' ? 'rowheader' : 'columnheader';
      case 'HEADER':
        return el.closest('article, aside, main, nav, section') ? 'generic' : 'banner';
      case 'FOOTER':
        return el.closest('article, aside, main, nav, section') ? 'generic' : 'contentinfo';
      case 'SECTION':
        return el.hasAttribute('aria-label') || el.hasAttribute('aria-labelledby') ? 'region' : 'generic';
      case 'FORM':
        return 'form';
      default:
        if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return 'textbox';
        return (Object.hasOwn(TAG, tag) && TAG[tag]) || 'generic';
    }
  };

  // The text `node` contributes to a name (ARIA's accessible name computation, step 2F):
  // `skip` is the control being named, whose own value a label's text leaves out.
  const textOf = (node, skip, depth) => {
    if (node.nodeType === 3) return node.data;
    if (node.nodeType !== 1 || depth > 32 || node === skip) return '';
    const el = node;
    const tag = tagOf(el);
    if (SKIP.has(tag) || el.getAttribute('aria-hidden') === 'true' || !rendered(el)) return '';
    const label = el.getAttribute('aria-label');
    if (label && label.trim()) return ' ' + label + ' ';
    if (tag === 'IMG' || tag === 'AREA') return ' ' + (el.getAttribute('alt') || el.getAttribute('title') || '') + ' ';
    if (tag === 'INPUT') {
      const type = (el.getAttribute('type') || 'text').toLowerCase();
      return type === 'hidden' || secret(el) ? '' : ' ' + el.value + ' ';
    }
    if (tag === 'TEXTAREA') return secret(el) ? '' : ' ' + el.value + ' ';
    if (tag === 'SELECT') return ' ' + (el.selectedOptions[0] ? el.selectedOptions[0].text : '') + ' ';
    if (tag === 'BR') return ' ';
    if (!visible(el) && el.childElementCount === 0) return '';
    let s = '';
    for (const child of kids(el)) s += textOf(child, skip, depth + 1);
    return BLOCK.has(tag) ? ' ' + s + ' ' : s;
  };
  const textOfIds = (el, ids) => ids.split(/\s+/)
    .map((id) => id && el.getRootNode().getElementById ? el.getRootNode().getElementById(id) : null)
    .filter(Boolean)
    .map((target) => target.getAttribute('aria-label') || textOf(target, null, 0))
    .join(' ');

  const nameOf = (el, role) => {
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const name = oneLine(textOfIds(el, by));
      if (name) return name;
    }
    const label = el.getAttribute('aria-label');
    if (label && label.trim()) return oneLine(label);
    const tag = tagOf(el);
    if (tag === 'INPUT') {
      const type = (el.getAttribute('type') || 'text').toLowerCase();
      if (type === 'submit' || type === 'reset' || type === 'button') {
        return oneLine(el.value || (type === 'submit' ? 'Submit' : type === 'reset' ? 'Reset' : ''));
      }
      if (type === 'image') return oneLine(el.getAttribute('alt') || el.value || 'Submit');
    }
    if (el.labels && el.labels.length > 0) {
      const name = oneLine(Array.from(el.labels, (l) => textOf(l, el, 0)).join(' '));
      if (name) return name;
    }
    if (tag === 'IMG' || tag === 'AREA') {
      const alt = el.getAttribute('alt');
      if (alt) return oneLine(alt);
    }
    const caption = tag === 'FIELDSET' ? el.querySelector(':scope > legend')
      : tag === 'TABLE' ? el.querySelector(':scope > caption')
        : tag === 'FIGURE' ? el.querySelector(':scope > figcaption') : null;
    if (caption) {
      const name = oneLine(textOf(caption, null, 0));
      if (name) return name;
    }
    if (tag === 'svg' && el.querySelector(':scope > title')) {
      return oneLine(el.querySelector(':scope > title').textContent);
    }
    if (FROM_CONTENT.has(role)) {
      const name = oneLine(el.childElementCount === 0 ? el.textContent : textOf(el, null, 0));
      if (name) return name;
    }
    if (!GROUPING.has(role)) {
      const hint = el.getAttribute('title') || el.getAttribute('placeholder') || el.getAttribute('aria-placeholder');
      if (hint) return oneLine(hint);
    }
    return '';
  };

  const states = (el, role) => {
    const s = [];
    const tag = tagOf(el);
    if (role === 'heading') {
      const level = Number(el.getAttribute('aria-level')) || (/^H[1-6]$/.test(tag) ? Number(tag[1]) : 2);
      s.push('level=' + level);
    }
    const checked = tag === 'INPUT' && (el.type === 'checkbox' || el.type === 'radio')
      ? (el.indeterminate ? 'mixed' : String(el.checked))
      : el.getAttribute('aria-checked') || el.getAttribute('aria-pressed');
    if (checked === 'true') s.push('checked');
    else if (checked === 'mixed') s.push('checked=mixed');
    if (tag === 'OPTION' ? el.selected : el.getAttribute('aria-selected') === 'true') s.push('selected');
    const expanded = el.getAttribute('aria-expanded');
    if (expanded === 'true' || (tag === 'DETAILS' && el.open)) s.push('expanded');
    else if (expanded === 'false') s.push('collapsed');
    if (el.getAttribute('aria-disabled') === 'true' || (typeof el.disabled === 'boolean' && el.matches(':disabled'))) {
      s.push('disabled');
    }
    if (el.required === true || el.getAttribute('aria-required') === 'true') s.push('required');
    if (el.ownerDocument.activeElement === el && el !== el.ownerDocument.body) s.push('active');
    if (role === 'link' && typeof el.href === 'string' && el.href) s.push('url=' + quoted(oneLine(el.href)));
    return s.map((state) => ' [' + state + ']').join('');
  };

  const valueOf = (el, role) => {
    if (!VALUED.has(role) || secret(el)) return '';
    const tag = tagOf(el);
    if (tag === 'SELECT') return el.selectedOptions[0] ? oneLine(el.selectedOptions[0].text) : '';
    if (tag === 'INPUT' || tag === 'TEXTAREA') return oneLine(el.value);
    if (el.isContentEditable) return oneLine(el.innerText);
    return oneLine(el.getAttribute('aria-valuenow') || el.getAttribute('aria-valuetext') || '');
  };

  // The lines of `nodes` at `depth`: a text that says again what a sibling's name says, or what
  // the name of the element it is in says (`said`: all of it, or with `partial` any part of it,
  // when the name was read from the content), is not written.
  const children = (nodes, depth, nesting, said, showText) => {
    const elements = [];
    for (const node of nodes) {
      if (node.nodeType === 1) elements.push(node);
    }
    const infos = new Map();
    const names = new Set();
    for (const el of elements) {
      let info = null;
      try {
        info = about(el);
      } catch (e) {
        info = null;
      }
      infos.set(el, info);
      if (info && info.name) names.add(info.name);
    }
    for (const node of nodes) {
      if (visited > o.nodes || late || (visited % 256 === 0 && (late = performance.now() > until))) {
        cut += 1;
        return;
      }
      if (node.nodeType === 3) {
        if (!showText) continue;
        const text = oneLine(node.data);
        if (!text || names.has(text) || (said && (said.partial ? said.name.includes(text) : said.name === text))) {
          continue;
        }
        line(depth, 'text ' + quoted(text));
      } else if (node.nodeType === 1) {
        try {
          walk(node, infos.get(node), depth, nesting + 1, said);
        } catch (e) {
          cut += 1;
        }
      }
    }
  };

  // What a walk needs of `el` before writing it: null when it and all under it are left out.
  const about = (el) => {
    if (SKIP.has(tagOf(el)) || el.getAttribute('aria-hidden') === 'true') return null;
    const shown = visible(el);
    if (!shown && !rendered(el)) return null;
    const role = roleOf(el);
    if (role === '') return null;
    const name = shown || el.childElementCount === 0 ? nameOf(el, role) : '';
    return { role, name, shown };
  };

  const walk = (el, info, depth, nesting, said) => {
    visited += 1;
    if (!info) return;
    if (depth > o.depth || nesting > 512) {
      cut += 1;
      return;
    }
    const { role, name, shown } = info;
    const tag = tagOf(el);
    // SVG's insides are drawing, not content.
    if (tag === 'svg') {
      if (shown && name) line(depth, 'image ' + quoted(name));
      return;
    }
    if (!shown || ((GROUPING.has(role)) && !name)) {
      children(kids(el), depth, nesting, said, shown);
      return;
    }
    let text = role;
    if (name) text += ' ' + quoted(name);
    text += states(el, role);
    const value = valueOf(el, role);
    const shownValue = value ? ': ' + quoted(value) : '';
    if (ACTIONABLE.has(role) || el.tabIndex >= 0 || el.isContentEditable) {
      // A line that does not fit with its ref is not written without it.
      if (!fits(depth, text.length + (' [ref=' + prefix + 'e' + numberOf(el) + ']').length + shownValue.length)) {
        cut += 1;
        return;
      }
      text += ' [ref=' + prefix + 'e' + refOf(el) + ']';
    }
    line(depth, text + shownValue);
    if (role === 'iframe') {
      let doc = null;
      try {
        doc = el.contentDocument;
      } catch (e) {
        doc = null;
      }
      if (doc && doc.documentElement) {
        children(kids(doc.body || doc.documentElement), depth + 1, nesting, null, true);
      } else {
        const at = lines;
        line(depth + 1, 'text "[a frame of another origin: its content is not in this snapshot]"');
        if (lines > at && st.ids.has(el)) frames.push({ n: st.ids.get(el), line: at });
      }
      return;
    }
    if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'IMG') return;
    children(kids(el), depth + 1, nesting, name ? { name, partial: FROM_CONTENT.has(role) } : null, true);
  };

  const root = document.body || document.documentElement;
  if (root) children(kids(root), 0, 0, null, true);
  return { text: out, refs, cut, title: oneLine(document.title || ''), frames };
}
