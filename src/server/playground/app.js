// clefserve playground (served at /, compiled into the binary). Plain DOM, no dependencies, no
// inline code (the page's Content-Security-Policy forbids it), and every request goes to this
// page's own origin: GET /health on load, POST /v1/systemone on Send. The API key lives in the
// input field only: never stored, never put into the curl text.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const el = (tag, props = {}, ...children) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-') || k.startsWith('aria-') || k === 'role' || k === 'for')
        e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) e.append(c);
    return e;
  };

  // What a test (or a curious user, in the console) can read: CSP violations, the last exchange.
  const state = { cspViolations: [], last: null, busy: false };
  window.clefPlayground = state;
  document.addEventListener('securitypolicyviolation', (e) => {
    state.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
  });

  const form = $('request-form');
  const list = $('questions');
  const template = $('question-template');
  let uid = 0;

  // ---- the question editor ------------------------------------------------------------------

  const OPTION_HINT = {
    noul: 'Optional: what “true” and “false” mean for this question.',
    choice: 'Each option: an id (what the answer names) and its description. At least one.',
    score: 'Levels from lowest to highest; the answer is the expected level (0-based). At least one.',
  };

  function optionRow(card, kind, a = '', b = '') {
    const n = ++uid;
    const li = el('li', { class: 'option' });
    if (kind === 'noul') {
      const id = `o${n}`;
      li.append(
        el('label', { for: id, text: `Description of ${a}` }),
        el('input', { id, type: 'text', value: b, 'data-key': a, autocomplete: 'off' }),
      );
      return li;
    }
    const idKey = `ok${n}`, idDesc = `od${n}`;
    const remove = el('button', { type: 'button', class: 'icon danger', text: 'Remove option' });
    remove.addEventListener('click', () => {
      const next = li.nextElementSibling || li.previousElementSibling;
      li.remove();
      renumber(card);
      (next ? next.querySelector('input') : card.querySelector('[data-role=add-option]')).focus();
    });
    if (kind === 'choice') {
      li.append(
        el('div', { class: 'field inline' }, el('label', { for: idKey, text: 'Option id' }),
           el('input', { id: idKey, type: 'text', value: a, 'data-role': 'okey', autocomplete: 'off',
                         spellcheck: false })),
        el('div', { class: 'field inline grow' }, el('label', { for: idDesc, text: 'Description' }),
           el('input', { id: idDesc, type: 'text', value: b, 'data-role': 'odesc', autocomplete: 'off' })),
        remove);
    } else {
      li.append(
        el('div', { class: 'field inline grow' },
           el('label', { for: idDesc, text: 'Level', 'data-role': 'level-label' }),
           el('input', { id: idDesc, type: 'text', value: b, 'data-role': 'odesc', autocomplete: 'off' })),
        remove);
    }
    return li;
  }

  function renumber(card) {
    card.querySelectorAll('[data-role=level-label]').forEach((l, i) => { l.textContent = `Level ${i}`; });
  }

  function setKind(card, kind, options) {
    card.dataset.kind = kind;
    card.querySelector('[data-role=badge]').textContent = kind;
    card.querySelector('[data-role=options-legend]').textContent =
      kind === 'noul' ? 'Criteria (true / false)' : kind === 'choice' ? 'Options' : 'Score levels';
    card.querySelector('[data-role=options-hint]').textContent = OPTION_HINT[kind];
    const ol = card.querySelector('[data-role=options]');
    ol.replaceChildren();
    if (kind === 'noul') {
      const o = options || {};
      ol.append(optionRow(card, kind, 'true', o.true || ''), optionRow(card, kind, 'false', o.false || ''));
    } else if (kind === 'choice') {
      const o = options || { option_a: '', option_b: '' };
      for (const [k, v] of Object.entries(o)) ol.append(optionRow(card, kind, k, v));
    } else {
      for (const v of options || ['low', 'medium', 'high']) ol.append(optionRow(card, kind, '', v));
      renumber(card);
    }
    card.querySelector('[data-role=add-option]').hidden = kind === 'noul';
  }

  function addQuestion(kind, q = {}) {
    const card = template.content.firstElementChild.cloneNode(true);
    const n = ++uid;
    // Unique ids for the labels of this card.
    for (const label of card.querySelectorAll('label[data-for]')) {
      const role = label.dataset.for;
      const input = card.querySelector(`[data-role=${role}]`);
      input.id = `${role}-${n}`;
      label.setAttribute('for', input.id);
    }
    const qerr = card.querySelector('[data-role=qerror]');
    const cerr = card.querySelector('[data-role=cerror]');
    qerr.id = `qerror-${n}`;
    cerr.id = `cerror-${n}`;
    card.querySelector('[data-role=qid]').setAttribute('aria-describedby', qerr.id);
    card.querySelector('[data-role=options]').setAttribute('aria-describedby', cerr.id);
    let id = q.id;
    if (id === undefined) {
      const taken = new Set(questionCards().map((c) => c.querySelector('[data-role=qid]').value));
      let i = questionCards().length + 1;
      while (taken.has(`q${i}`)) i++;
      id = `q${i}`;
    }
    card.querySelector('[data-role=qid]').value = id;
    card.querySelector('[data-role=qtype]').value = kind;
    card.querySelector('[data-role=instructions]').value = q.instructions || '';
    setKind(card, kind, q.criteria);
    card.querySelector('[data-role=qtype]').addEventListener('change', (e) => setKind(card, e.target.value));
    card.querySelector('[data-role=add-option]').addEventListener('click', () => {
      const row = optionRow(card, card.dataset.kind, '', '');
      card.querySelector('[data-role=options]').append(row);
      renumber(card);
      row.querySelector('input').focus();
    });
    card.querySelector('[data-role=remove]').addEventListener('click', () => {
      const next = card.nextElementSibling || card.previousElementSibling;
      card.remove();
      (next ? next.querySelector('[data-role=qid]') : form.querySelector('[data-add=noul]')).focus();
    });
    card.querySelector('[data-role=up]').addEventListener('click', (e) => {
      if (card.previousElementSibling) list.insertBefore(card, card.previousElementSibling);
      e.target.focus();
    });
    card.querySelector('[data-role=down]').addEventListener('click', (e) => {
      if (card.nextElementSibling) list.insertBefore(card.nextElementSibling, card);
      e.target.focus();
    });
    list.append(card);
    return card;
  }

  const questionCards = () => Array.from(list.children);

  for (const b of form.querySelectorAll('[data-add]')) {
    b.addEventListener('click', () => addQuestion(b.dataset.add).querySelector('[data-role=qid]').focus());
  }

  // ---- the request ------------------------------------------------------------------------

  class InputError extends Error {
    constructor(field, msg) { super(msg); this.field = field; }
  }

  function buildRequest() {
    const req = { model: $('model').value };
    const text = $('state').value;
    if (form.querySelector('input[name=state-mode]:checked').value === 'json') {
      try {
        req.state = JSON.parse(text);
      } catch (e) {
        throw new InputError($('state'), `Not valid JSON: ${e.message}`);
      }
    } else {
      req.state = text;
    }
    const questions = {};
    for (const card of questionCards()) {
      const id = card.querySelector('[data-role=qid]').value;
      const kind = card.dataset.kind;
      const q = { type: kind };
      const instructions = card.querySelector('[data-role=instructions]').value;
      if (instructions.trim() !== '') q.instructions = instructions;
      const rows = Array.from(card.querySelectorAll('[data-role=options] > li'));
      if (kind === 'noul') {
        const c = {};
        for (const r of rows) {
          const input = r.querySelector('input');
          if (input.value.trim() !== '') c[input.dataset.key] = input.value;
        }
        if (Object.keys(c).length) q.criteria = c;
      } else if (kind === 'choice') {
        q.criteria = {};
        for (const r of rows) q.criteria[r.querySelector('[data-role=okey]').value] = r.querySelector('[data-role=odesc]').value;
      } else {
        q.criteria = rows.map((r) => r.querySelector('[data-role=odesc]').value);
      }
      if (Object.prototype.hasOwnProperty.call(questions, id))
        throw new InputError(card.querySelector('[data-role=qid]'), `Question id “${id}” is used twice.`);
      questions[id] = q;
    }
    req.questions = questions;
    const truncation = $('truncation').value;
    if (truncation) req.truncation = truncation;
    return req;
  }

  function shellQuote(s) {
    return `'${s.replace(/'/g, `'\\''`)}'`;
  }

  function curlText(req) {
    const lines = [`curl -sS -i ${shellQuote(`${location.origin}/v1/systemone`)}`,
                   `  -H 'Content-Type: application/json'`];
    if ($('api-key').value) lines.push(`  -H "Authorization: Bearer $CLEF_API_KEY"`);
    lines.push(`  --data-binary ${shellQuote(JSON.stringify(req))}`);
    return lines.join(' \\\n');
  }

  // ---- errors next to their fields ------------------------------------------------------------

  function clearErrors() {
    for (const p of document.querySelectorAll('.field-error, #form-error')) {
      p.hidden = true;
      p.textContent = '';
    }
    for (const i of document.querySelectorAll('[aria-invalid]')) i.removeAttribute('aria-invalid');
    for (const c of document.querySelectorAll('.question.invalid')) c.classList.remove('invalid');
  }

  function cardById(id) {
    return questionCards().find((c) => c.querySelector('[data-role=qid]').value === String(id));
  }

  // Where a 422 `loc` points: [message element, the control to mark and focus].
  function locate(loc) {
    const path = Array.isArray(loc) ? (loc[0] === 'body' ? loc.slice(1) : loc) : [];
    const top = path[0];
    const simple = { model: 'model', state: 'state', truncation: 'truncation', images: 'images', videos: 'images' };
    if (top in simple && simple[top] !== 'images') {
      const control = $(simple[top]);
      return [$(`${simple[top]}-error`), control];
    }
    if (top === 'questions') {
      const card = path.length > 1 ? cardById(path[1]) : null;
      if (!card) return [$('questions-error'), null];
      card.classList.add('invalid');
      const part = path[2];
      if (part === 'criteria') return [card.querySelector('[data-role=cerror]'), optionControl(card, path[3])];
      if (part === 'type') return [card.querySelector('[data-role=qerror]'), card.querySelector('[data-role=qtype]')];
      if (part === 'instructions') return [card.querySelector('[data-role=qerror]'), card.querySelector('[data-role=instructions]')];
      return [card.querySelector('[data-role=qerror]'), card.querySelector('[data-role=qid]')];
    }
    return [$('form-error'), null];
  }

  function optionControl(card, which) {
    const rows = Array.from(card.querySelectorAll('[data-role=options] > li'));
    let row = null;
    if (typeof which === 'number') row = rows[which];
    else if (which !== undefined) row = rows.find((r) => (r.querySelector('[data-role=okey]') || r.querySelector('input')).value === which
                                                       || r.querySelector('input').dataset.key === which);
    if (row) return row.querySelector('[data-role=odesc], input');
    return card.querySelector('[data-role=options] input') || card.querySelector('[data-role=add-option]');
  }

  function showError(target, control, msg) {
    target.textContent = msg;
    target.hidden = false;
    if (control) {
      control.setAttribute('aria-invalid', 'true');
      const ids = new Set((control.getAttribute('aria-describedby') || '').split(' ').filter(Boolean));
      if (target.id) ids.add(target.id);
      control.setAttribute('aria-describedby', Array.from(ids).join(' '));
    }
    return control;
  }

  function showServerError(status, body) {
    let first = null;
    const detail = body && typeof body === 'object' ? body.detail : undefined;
    if (status === 422 && Array.isArray(detail)) {
      for (const item of detail) {
        const [target, control] = locate(item.loc);
        const where = Array.isArray(item.loc) ? item.loc.join(' → ') : '';
        const c = showError(target, control, `${item.msg} (${item.type}${where ? `, at ${where}` : ''})`);
        first = first || control || target;
      }
    } else {
      const msg = typeof detail === 'string' ? detail : (typeof body === 'string' && body) || `HTTP ${status}`;
      let target = $('form-error'), control = null;
      if (status === 401) { target = $('api-key-error'); control = $('api-key'); }
      else if (status === 404 && /model/i.test(msg)) { target = $('model-error'); control = $('model'); }
      else if (status === 413) { target = $('state-error'); control = $('state'); }
      showError(target, control, `${status}: ${msg}`);
      first = control || target;
    }
    if (first && first.focus) {
      if (!first.matches('input, select, textarea, button')) first.setAttribute('tabindex', '-1');
      first.focus();
    }
  }

  // ---- the answer -----------------------------------------------------------------------------

  const fmt = (x) => (typeof x === 'number' ? x.toFixed(4) : String(x));

  function bars(qid, rows, chosen) {
    const ul = el('ul', { class: 'bars', 'aria-label': `Probabilities of ${qid}` });
    for (const [option, p, label] of rows) {
      const isChosen = option === chosen;
      const fill = el('span', { class: 'fill' });
      fill.style.width = `${Math.max(0, Math.min(1, p)) * 100}%`;  // CSSOM: allowed by the CSP
      const li = el('li', {
        class: isChosen ? 'bar chosen' : 'bar',
        'data-question': qid, 'data-option': option, 'data-value': String(p),
      },
      el('span', { class: 'bar-label', text: label === undefined ? option : label, title: option }),
      el('span', { class: 'track', 'aria-hidden': 'true' }, fill),
      el('span', { class: 'bar-value', text: fmt(p) }));
      if (isChosen) {
        li.setAttribute('aria-current', 'true');
        li.append(el('span', { class: 'chosen-mark', text: 'chosen' }));
      }
      ul.append(li);
    }
    return ul;
  }

  function answerCard(qid, a) {
    const card = el('article', { class: 'answer-card', 'data-question': qid, 'data-type': a.type || '' });
    const head = el('h3', {}, el('span', { class: 'qid', text: qid }), el('span', { class: 'badge', text: a.type || '?' }));
    card.append(head);
    if (a.type === 'noul') {
      const p = a.noul;
      const chosen = p >= 0.5 ? 'true' : 'false';
      card.append(el('p', { class: 'verdict', text: `noul = ${fmt(p)} → ${chosen}` }));
      card.append(bars(qid, [['true', p], ['false', Math.round((1 - p) * 10000) / 10000]], chosen));
    } else if (a.type === 'choice') {
      card.append(el('p', { class: 'verdict', text: `choice = ${a.choice} (confidence ${fmt(a.confidence)})` }));
      card.append(bars(qid, Object.entries(a.probabilities || {}), a.choice));
    } else if (a.type === 'score') {
      const probs = Object.entries(a.probabilities || {});
      let best = null;
      for (const [k, p] of probs) if (best === null || p > best[1]) best = [k, p];
      const legend = a.legend || {};
      card.append(el('p', { class: 'verdict',
        text: `score = ${fmt(a.score)} (expected level); most likely level ${best ? best[0] : '?'} (confidence ${fmt(a.confidence)})` }));
      card.append(bars(qid, probs.map(([k, p]) => [k, p, `${k}: ${legend[k] !== undefined ? legend[k] : ''}`]), best && best[0]));
    } else {
      card.append(el('pre', { text: JSON.stringify(a, null, 2) }));
    }
    return card;
  }

  // "read;dur=1.2, encode;dur=0.3" -> [["read", 1.2], ["encode", 0.3]]
  function parseServerTiming(h) {
    if (!h) return [];
    return h.split(',').map((part) => {
      const [name, ...params] = part.trim().split(';');
      const dur = params.map((x) => x.trim()).find((x) => x.startsWith('dur='));
      return [name.trim(), dur ? Number(dur.slice(4)) : NaN];
    }).filter(([n]) => n);
  }

  function renderExchange(x) {
    $('answer-empty').hidden = true;
    $('answer-body').hidden = false;
    $('sum-status').textContent = `${x.status} ${x.statusText || ''}`.trim();
    const usage = x.body && x.body.usage;
    $('sum-tokens').textContent = usage ? `${usage.input_tokens}${usage.truncated_state_tokens ? ` (state cut by ${usage.truncated_state_tokens})` : ''}` : '—';
    $('sum-latency').textContent = `${x.latencyMs.toFixed(1)} ms`;
    const timing = parseServerTiming(x.serverTiming);
    const total = timing.find(([n]) => n === 'total');
    $('sum-server').textContent = total ? `${total[1].toFixed(3)} ms` : '—';
    $('sum-id').textContent = x.requestId || '—';
    const tbody = $('timing-body');
    tbody.replaceChildren();
    const max = total ? total[1] : Math.max(1e-9, ...timing.map(([, d]) => d));
    for (const [name, dur] of timing) {
      const fill = el('span', { class: 'fill' });
      fill.style.width = `${Number.isFinite(dur) && max > 0 ? Math.min(100, (dur / max) * 100) : 0}%`;
      tbody.append(el('tr', { 'data-phase': name }, el('th', { scope: 'row', text: name }),
                      el('td', { text: Number.isFinite(dur) ? dur.toFixed(3) : '?' }),
                      el('td', {}, el('span', { class: 'track', 'aria-hidden': 'true' }, fill))));
    }
    const answers = $('answers');
    answers.replaceChildren();
    if (x.ok && x.body && x.body.answers) {
      for (const [qid, a] of Object.entries(x.body.answers)) answers.append(answerCard(qid, a));
    } else {
      answers.append(el('p', { class: 'error', text: 'No answer: the server refused the request (the message is next to the field it names).' }));
    }
    $('raw-request').textContent = JSON.stringify(x.request, null, 2);
    $('raw-response').textContent = typeof x.body === 'string' ? x.body : JSON.stringify(x.body, null, 2);
    $('raw-curl').textContent = curlText(x.request);
  }

  async function send() {
    if (state.busy) return;
    clearErrors();
    let req;
    try {
      req = buildRequest();
    } catch (e) {
      if (!(e instanceof InputError)) throw e;
      const errId = e.field.getAttribute('aria-describedby') || '';
      const target = document.getElementById(errId.split(' ').find((i) => i.includes('error'))) || $('form-error');
      showError(target, e.field, e.message);
      e.field.focus();
      return;
    }
    const headers = { 'Content-Type': 'application/json' };
    const key = $('api-key').value;
    if (key) headers.Authorization = `Bearer ${key}`;
    state.busy = true;
    $('send').disabled = true;
    $('status').textContent = 'Sending…';
    const t0 = performance.now();
    try {
      // Relative URL: this origin only (the CSP's connect-src 'self' enforces it too).
      const res = await fetch('/v1/systemone', {
        method: 'POST', headers, body: JSON.stringify(req), credentials: 'omit', cache: 'no-store',
        referrerPolicy: 'no-referrer',
      });
      const text = await res.text();
      const latencyMs = performance.now() - t0;
      let body = text;
      try { body = JSON.parse(text); } catch (_) { /* not JSON: shown raw */ }
      const x = {
        request: req, status: res.status, statusText: res.statusText, ok: res.ok, body, latencyMs,
        serverTiming: res.headers.get('Server-Timing'), requestId: res.headers.get('X-Request-Id'),
      };
      state.last = x;
      renderExchange(x);
      if (res.ok) {
        $('status').textContent = `Answered in ${latencyMs.toFixed(1)} ms.`;
        // One column (a phone): the answer is below the form; bring it into view.
        if (window.matchMedia('(max-width: 900px)').matches) $('answer').scrollIntoView({ block: 'start' });
      } else {
        $('status').textContent = `The server answered ${res.status}.`;
        showServerError(res.status, body);
      }
    } catch (e) {
      state.last = { request: req, error: String(e) };
      $('status').textContent = '';
      showError($('form-error'), null, `The request failed: ${e.message || e}`);
    } finally {
      state.busy = false;
      $('send').disabled = false;
      document.body.dataset.exchanges = String((Number(document.body.dataset.exchanges) || 0) + 1);
    }
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  form.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      send();
    }
  });

  async function copyCurl() {
    clearErrors();
    let req;
    try {
      req = buildRequest();
    } catch (e) {
      if (!(e instanceof InputError)) throw e;
      showError($('form-error'), e.field, e.message);
      return;
    }
    const text = curlText(req);
    $('raw-curl').textContent = text;
    let ok = false;
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        ok = true;
      }
    } catch (_) { /* fall back below */ }
    if (!ok) {
      const ta = el('textarea', { class: 'offscreen', value: text, readOnly: true });
      document.body.append(ta);
      ta.select();
      try { ok = document.execCommand('copy'); } catch (_) { ok = false; }
      ta.remove();
    }
    $('status').textContent = ok ? 'curl command copied to the clipboard.'
      : 'Could not reach the clipboard: the curl command is under “Raw request / response JSON”.';
    if (!ok) $('raw').open = true;
  }
  $('copy-curl').addEventListener('click', copyCurl);

  // ---- start ------------------------------------------------------------------------------------

  addQuestion('noul', { id: 'outage', instructions: 'Is a customer-facing service down?' });
  addQuestion('choice', {
    id: 'team',
    criteria: { payments: 'The payments team', platform: 'The platform / infrastructure team', support: 'Customer support' },
  });
  addQuestion('score', { id: 'urgency', criteria: ['none', 'low', 'medium', 'high', 'critical'] });

  fetch('/health', { credentials: 'omit', cache: 'no-store' })
    .then((r) => r.json())
    .then((h) => {
      if (h.status !== 'ok') {
        $('server-info').textContent = `Server: ${typeof h.detail === 'string' ? h.detail : 'not ready'}`;
        return;
      }
      if (!$('model').value && typeof h.model === 'string') $('model').value = h.model;
      const bits = [`model ${h.model}`, `${h.backend} (${h.device})`, `max ${h.max_length} tokens`, `clefserve ${h.version}`];
      if (h.demo) bits.push('DEMO model: random weights, meaningless answers');
      $('server-info').textContent = bits.join(' · ');
    })
    .catch(() => { $('server-info').textContent = 'Could not read /health.'; });
})();
