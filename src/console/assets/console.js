/*
 * walrelay operator console (served as /console.js; plain ES2017, no build step, no deps).
 *
 * Shows: a status line (streaming / lagging / down), the overview (guarantee, source,
 * replication slot, the relay's positions and lag, broker, in-flight, counts), SVG charts
 * of the last hour (lag; throughput), recent problems, dead letters, outbox tables, an
 * event lookup and, only when the overview says "actions": true, replay-dry-run / audit.
 *
 * Reads (same origin, JSON): GET /api/v1/overview, /api/v1/history, /api/v1/problems
 * (every 5 s), /api/v1/tables (every 15 s), /api/v1/events/<id> (on demand, and for
 * ?lookup=<id> at load), /api/v1/actions (every 2 s while an action runs);
 * POST /api/v1/actions/{replay-dry-run,audit} with a bearer token that lives only in the
 * password input. On a non-loopback listen every read needs that token too: a 401 shows a
 * token form at the top, and what is entered there (kept in this page only, never stored)
 * goes with every request. Nothing from the API is rendered as HTML: createElement/textContent
 * only.
 */
(function () {
  'use strict';
  const API = '/api/v1/';
  const SVGNS = 'http://www.w3.org/2000/svg';
  const LAG_WARN_S = 30;
  const PANELS = [['overview', 'Overview'], ['charts', 'Last hour'], ['problems', 'Recent problems'],
    ['dead-letters', 'Dead letters'], ['tables', 'Outbox tables'], ['lookup', 'Event lookup'], ['actions', 'Actions']];
  const panels = {};
  let actionsShown = false, actionTimer = null, lookupSeq = 0;
  // The console's token, once a read was refused without it; the refresh loops, to rerun then.
  let token = '';
  const loops = [];

  /* ---------- DOM helpers ---------- */
  const h = (tag, attrs, kids) => fill(document.createElement(tag), attrs, kids);
  const svg = (tag, attrs, kids) => fill(document.createElementNS(SVGNS, tag), attrs, kids);
  const byId = (id) => document.getElementById(id);
  const td = (text, cls) => h('td', { class: cls, text: dash(text) });

  // attrs: plain attributes, plus `text` (textContent) and `on<event>` (listener).
  function fill(node, attrs, kids) {
    Object.keys(attrs || {}).forEach((k) => {
      const v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === 'text') node.textContent = String(v);
      else if (k.slice(0, 2) === 'on') node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? '' : String(v));
    });
    (kids || []).forEach((c) => {
      if (c !== null && c !== undefined) node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  /* ---------- formatting ---------- */
  const isNum = (v) => typeof v === 'number' && isFinite(v);
  const dash = (v) => (v === null || v === undefined || v === '' ? '–' : String(v));
  const fmtNum = (n) => (isNum(n) ? n.toLocaleString('en-US') : '–');
  const fmtRate = (n) => (isNum(n) ? String(+n.toFixed(n < 10 ? 2 : 0)) + '/s' : '–');
  const yesNo = (v) => (v === true ? 'yes' : v === false ? 'no' : '–');
  // "2026-12-06T02:10:00.000000Z" -> "2026-12-06 02:10:00Z" (stays UTC, like the server text).
  const fmtTime = (iso) => (iso ? String(iso).replace('T', ' ').replace(/\.\d+/, '') : '–');
  const clock = (unix) => (isNum(unix) ? new Date(unix * 1000).toISOString().slice(11, 19) + 'Z' : '–');

  function fmtBytes(n) {
    if (!isNum(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = Math.abs(n), i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (n < 0 ? '-' : '') + (i === 0 ? String(Math.round(v)) : v.toFixed(v < 100 ? 1 : 0)) + ' ' + units[i];
  }

  function fmtSeconds(s) {
    if (!isNum(s)) return '–';
    if (s < 60) return String(+s.toFixed(s < 10 ? 2 : 0)) + ' s';
    const f = Math.floor;
    if (s < 3600) return f(s / 60) + ' min ' + f(s % 60) + ' s';
    if (s < 86400) return f(s / 3600) + ' h ' + f(s % 3600 / 60) + ' min';
    return f(s / 86400) + ' d ' + f(s % 86400 / 3600) + ' h';
  }

  /* ---------- fetching and refresh loops ---------- */
  async function api(path, opts) {
    const o = Object.assign({ cache: 'no-store' }, opts);
    o.headers = Object.assign({ Accept: 'application/json' }, (opts && opts.headers) || {});
    if (token && !o.headers.Authorization) o.headers.Authorization = 'Bearer ' + token;
    const res = await fetch(API + path, o);
    if (res.status === 401 && !(opts && opts.method === 'POST')) askToken();
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    return { status: res.status, ok: res.ok, body: body };
  }

  // The form a refused read brings up; entering the token reruns every refresh at once.
  function askToken() {
    if (byId('token-form')) return;
    const input = h('input', { id: 'console-token', type: 'password', autocomplete: 'off' });
    byId('top').appendChild(h('form', { id: 'token-form', class: 'row',
      onsubmit: (ev) => { ev.preventDefault(); token = input.value.trim(); loops.forEach((fn) => fn()); } }, [
      h('label', { for: 'console-token', text: 'This console needs its token ([http] console_token)' }), input,
      h('button', { type: 'submit', text: 'Open' })]));
  }

  function errText(r) {
    const msg = r.body && r.body.error ? String(r.body.error) : '';
    return 'HTTP ' + r.status + (msg ? ': ' + msg : '');
  }

  // setTimeout loop; while the tab is hidden the work is skipped, the schedule kept.
  function every(ms, fn) {
    loops.push(fn);
    const tick = async () => {
      if (!document.hidden) await fn();
      setTimeout(tick, ms);
    };
    tick();
  }

  // GET path, render the body on success; on failure show the error in the named panels.
  function refresher(names, path, render, onFail) {
    return async () => {
      try {
        const r = await api(path);
        if (!r.ok || !r.body) throw new Error(errText(r));
        names.forEach((n) => setError(n, null));
        render(r.body);
      } catch (e) {
        names.forEach((n) => setError(n, 'Could not refresh: ' + e.message));
        if (onFail) onFail(e);
      }
    };
  }

  /* ---------- layout ---------- */
  function buildLayout() {
    const main = byId('live');
    PANELS.forEach(([id, title]) => {
      const body = h('div', { class: 'panel-body' }, [h('p', { class: 'muted', text: 'loading…' })]);
      const err = h('p', { class: 'panel-error', hidden: true });
      const sec = h('section', { id: id + '-panel', class: 'panel', 'aria-labelledby': id + '-h' },
        [h('h2', { id: id + '-h', text: title }), err, body]);
      panels[id] = { sec: sec, body: body, err: err };
      main.appendChild(sec);
    });
    panels.actions.sec.hidden = true;
    byId('top').appendChild(h('p', { id: 'status', class: 'status', 'data-state': 'unknown', role: 'status', text: 'connecting…' }));
    main.hidden = false;
    const asText = byId('as-text');
    if (asText) {
      asText.open = false;
      asText.querySelector('summary').textContent = 'As text (server summary at page load)';
    }
  }

  function setError(name, msg) {
    panels[name].err.hidden = !msg;
    panels[name].err.textContent = msg || '';
  }

  /* ---------- status line and overview ---------- */
  const unreachableFor = (b) => (isNum(b.unreachable_for_s) ? ' for ' + fmtSeconds(b.unreachable_for_s) : '');
  const brokerState = (b) => (b.reachable === true ? 'reachable'
    : b.reachable === false ? 'unreachable' + unreachableFor(b) : 'not asked yet');

  function renderStatus(o) {
    const pos = o.positions || {}, b = o.broker || {}, bad = [];
    if (!o.streaming) bad.push('not streaming');
    if (b.reachable === false) bad.push('broker unreachable' + unreachableFor(b));
    let state = 'streaming';
    if (bad.length) state = 'down';
    else if (isNum(pos.lag_seconds) && pos.lag_seconds > LAG_WARN_S) state = 'lagging';
    setStatus(state, (bad.length ? bad.join(', ') : state) + ' · lag ' + fmtSeconds(pos.lag_seconds) +
      ' (' + fmtBytes(pos.lag_bytes) + ') · as of ' + fmtTime(o.now));
  }

  function setStatus(state, text) {
    const st = byId('status');
    st.setAttribute('data-state', state);
    st.className = 'status status-' + state;
    st.textContent = text;
  }

  // rows: [label, value, {id, mono}] -> <div class="group"><h3>…</h3><dl>…</dl></div>
  function group(title, rows) {
    const dl = h('dl');
    rows.forEach(([label, value, o]) => {
      dl.appendChild(h('dt', { text: label }));
      dl.appendChild(h('dd', { id: o && o.id, class: o && o.mono ? 'mono' : null, text: dash(value) }));
    });
    return h('div', { class: 'group' }, [h('h3', { text: title }), dl]);
  }

  function renderOverview(o) {
    renderStatus(o);
    showActions(o.actions === true);
    const src = o.source || {}, sl = o.slot || {}, pos = o.positions || {}, b = o.broker || {};
    const inf = o.inflight || {}, c = o.counts || {}, m = { mono: true };
    const up = (Date.parse(o.now) - Date.parse(o.started_at)) / 1000;
    clear(panels.overview.body).appendChild(h('div', { class: 'groups' }, [
      group('Relay', [['guarantee', o.guarantee, { id: 'guarantee' }], ['sink', o.sink, { id: 'sink' }], ['streaming', yesNo(o.streaming), { id: 'streaming' }],
        ['version', o.version], ['started', fmtTime(o.started_at) + (isNum(up) ? ' (up ' + fmtSeconds(up) + ')' : '')]]),
      group('Source', [['url', src.url, m], ['slot', src.slot, m], ['publication', src.publication, m]]),
      group(o.slot ? 'Slot' : 'Slot (not sampled yet)', [
        ['confirmed LSN', sl.confirmed_lsn, { id: 'slot-confirmed-lsn', mono: true }], ['restart LSN', sl.restart_lsn, m],
        ['retained WAL', fmtBytes(sl.retained_bytes), { id: 'slot-retained' }], ['wal_status', sl.wal_status, m],
        ['active pid', sl.active_pid, m], ['failover', yesNo(sl.failover)], ['sampled', o.slot ? fmtTime(sl.sampled_at) : null]]),
      group('Relay positions', [['received LSN', pos.received_lsn, m], ['acked LSN', pos.acked_lsn, m],
        ['confirmed LSN', pos.confirmed_lsn, m], ['lag', fmtSeconds(pos.lag_seconds) + ' · ' + fmtBytes(pos.lag_bytes), { id: 'lag' }]]),
      group('Broker', [['bootstrap', b.bootstrap, m], ['state', brokerState(b), { id: 'broker-state' }],
        ['last error', b.last_error, { id: 'broker-last-error' }]]),
      group('In flight & counts', [['in flight', fmtNum(inf.records) + ' records · ' + fmtBytes(inf.bytes)],
        ['published', fmtNum(c.published)], ['dead-lettered', fmtNum(c.dead_lettered)],
        ['delivery errors', fmtNum(c.delivery_errors)], ['reconnects', fmtNum(c.reconnects)]])]));
  }

  /* ---------- charts ---------- */
  function renderHistory(hist) {
    const samples = Array.isArray(hist.samples) ? hist.samples : [];
    const body = clear(panels.charts.body);
    body.appendChild(h('div', { class: 'charts' }, [
      chart('lag-chart', 'Lag', samples, [{ key: 'lag_seconds', label: 'lag (time)', fmt: fmtSeconds },
        { key: 'lag_bytes', label: 'lag (WAL bytes)', fmt: fmtBytes }]),
      chart('throughput-chart', 'Throughput', samples, [{ key: 'events_per_s', label: 'events/s', fmt: fmtRate },
        { key: 'inflight_records', label: 'in-flight records', fmt: fmtNum }])]));
    if (isNum(hist.interval_s)) {
      body.appendChild(h('p', { class: 'muted small', text: 'One sample every ' + hist.interval_s + ' s; times in UTC.' }));
    }
    const lag = samples.map((s) => s.lag_seconds).filter(isNum);
    const lagSvg = byId('lag-chart');
    lagSvg.setAttribute('data-samples', String(samples.length));
    lagSvg.setAttribute('data-last-lag-seconds', lag.length ? String(lag[lag.length - 1]) : '');
    lagSvg.setAttribute('data-max-lag-seconds', lag.length ? String(Math.max.apply(null, lag)) : '');
  }

  // Line chart of up to two series: series[0] on the left axis, series[1] on the right, each
  // scaled from 0 to its own max; x runs from the first to the last sample time.
  function chart(id, title, samples, series) {
    const W = 640, H = 190, L = 78, R = 78, T = 12, B = 26, pw = W - L - R, ph = H - T - B;
    const root = svg('svg', { id: id, class: 'chart', viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': title + ' chart' },
      [svg('rect', { class: 'plot', x: L, y: T, width: pw, height: ph }),
        svg('line', { class: 'grid', x1: L, x2: L + pw, y1: T + ph / 2, y2: T + ph / 2 })]);
    const legend = h('ul', { class: 'legend' });
    const fig = h('figure', { class: 'chart-box' }, [h('figcaption', { text: title }), root, legend]);
    if (!samples.length) {
      root.appendChild(svgText(L + pw / 2, T + ph / 2, 'no samples yet', 'middle', 'muted'));
      return fig;
    }
    const t0 = samples[0].t, t1 = samples[samples.length - 1].t, span = Math.max(t1 - t0, 1);
    const x = (t) => L + (t - t0) / span * pw;
    series.forEach((s, i) => {
      const cls = 's' + (i + 1), vals = samples.map((p) => p[s.key]).filter(isNum);
      const max = vals.length ? Math.max.apply(null, vals) : null;
      const min = vals.length ? Math.min.apply(null, vals) : null;
      const top = max > 0 ? max : 1;
      drawSeries(root, samples, s.key, x, (v) => T + (1 - v / top) * ph, cls);
      const ax = i === 0 ? L - 6 : L + pw + 6, anchor = i === 0 ? 'end' : 'start';
      root.appendChild(svgText(ax, T + 9, s.fmt(max === null ? 0 : max), anchor, cls));
      root.appendChild(svgText(ax, T + ph, s.fmt(0), anchor, cls));
      const last = vals.length ? vals[vals.length - 1] : null;
      legend.appendChild(h('li', {}, [h('span', { class: 'swatch ' + cls, 'aria-hidden': 'true' }),
        s.label + ': last ' + s.fmt(last) + ' · min ' + s.fmt(min) + ' · max ' + s.fmt(max)]));
    });
    root.appendChild(svgText(L, H - 6, clock(t0), 'start', 'muted'));
    root.appendChild(svgText(L + pw / 2, H - 6, 'span ' + fmtSeconds(t1 - t0), 'middle', 'muted'));
    root.appendChild(svgText(L + pw, H - 6, clock(t1), 'end', 'muted'));
    return fig;
  }

  // One <path>, with gaps where a value is missing, plus a dot on the latest point.
  function drawSeries(root, samples, key, x, y, cls) {
    let d = '', pen = false, lastPt = null;
    samples.forEach((p) => {
      if (!isNum(p[key]) || !isNum(p.t)) { pen = false; return; }
      lastPt = [x(p.t).toFixed(1), y(p[key]).toFixed(1)];
      d += (pen ? 'L' : 'M') + lastPt[0] + ' ' + lastPt[1];
      pen = true;
    });
    if (d) root.appendChild(svg('path', { class: 'line ' + cls, d: d }));
    if (lastPt) root.appendChild(svg('circle', { class: 'dot ' + cls, cx: lastPt[0], cy: lastPt[1], r: 2.5 }));
  }

  const svgText = (x, y, text, anchor, cls) => svg('text', { x: x, y: y, 'text-anchor': anchor, class: cls, text: text });

  /* ---------- problems, dead letters, tables ---------- */
  function renderProblems(pr) {
    renderLog(Array.isArray(pr.log) ? pr.log : []);
    renderDeadLetters(pr.dead_letters || {});
  }

  function renderLog(log) {
    const body = clear(panels.problems.body);
    if (!log.length) {
      body.appendChild(h('p', { class: 'muted', id: 'problem-log-empty', text: 'No recent warnings or errors.' }));
      return;
    }
    body.appendChild(h('ol', { class: 'log', id: 'problem-log' }, log.map((e) => {
      const level = String(e.level || '');
      return h('li', { class: 'problem level-' + level.toLowerCase().replace(/[^a-z]/g, ''), 'data-level': level }, [
        h('div', { class: 'meta' }, [h('span', { class: 'level', text: level }), ' ',
          h('time', { datetime: e.time, text: fmtTime(e.time) }), ' ', h('span', { class: 'target', text: e.target })]),
        h('div', { class: 'message', text: dash(e.message) }),
        e.hint ? h('div', { class: 'hint', text: 'hint: ' + e.hint }) : null]);
    })));
  }

  // heads starting with '#' are numeric (right-aligned) columns.
  function dataTable(id, caption, heads, rows) {
    const headRow = h('tr', {}, heads.map((c) => h('th', { scope: 'col', class: c[0] === '#' ? 'num' : null, text: c.replace(/^#/, '') })));
    if (!rows.length) rows = [h('tr', { class: 'empty' }, [h('td', { colspan: heads.length, class: 'muted', text: 'none' })])];
    return h('table', { id: id }, [caption ? h('caption', { text: caption }) : null, h('thead', {}, [headRow]), h('tbody', {}, rows)]);
  }

  function renderDeadLetters(dl) {
    const body = clear(panels['dead-letters'].body);
    body.appendChild(h('p', {}, ['Total: ', h('strong', { id: 'dead-letter-total', text: fmtNum(dl.total) })]));
    body.appendChild(dataTable('dead-letter-reasons', 'By reason', ['Reason', '#Count'], (dl.by_reason || []).map((r) =>
      h('tr', { class: 'dead-letter-reason', 'data-reason': r.reason }, [td(r.reason), td(fmtNum(r.count), 'num')]))));
    body.appendChild(dataTable('dead-letter-recent', 'Most recent', ['Time', 'Event id', 'Source', 'Topic', 'Reason'],
      (dl.recent || []).map((r) => h('tr', { class: 'dead-letter', 'data-event-id': r.event_id, 'data-reason': r.reason }, [
        td(fmtTime(r.time), 'mono'), h('td', { class: 'mono' }, [lookupLink(r.event_id)]),
        td(r.source, 'mono'), td(r.topic, 'mono'), td(r.reason)]))));
  }

  function lookupLink(id) {
    if (!id) return '–';
    return h('a', { href: '?lookup=' + encodeURIComponent(id), title: 'Look up this event', text: id,
      onclick: (ev) => { ev.preventDefault(); runLookup(String(id), true); } });
  }

  function renderTables(t) {
    clear(panels.tables.body).appendChild(dataTable('source-tables', null,
      ['Table', '#Events', 'Last event commit', '#Last event age'], (t.tables || []).map((r) =>
        h('tr', { class: 'source-table', 'data-table': r.table }, [td(r.table, 'mono'), td(fmtNum(r.events), 'num'),
          td(fmtTime(r.last_event_commit), 'mono'), td(isNum(r.last_event_age_s) ? fmtSeconds(r.last_event_age_s) + ' ago' : null, 'num')]))));
  }

  /* ---------- event lookup ---------- */
  function buildLookup() {
    const input = h('input', { id: 'lookup-id', name: 'lookup', type: 'text', class: 'mono', required: true,
      autocomplete: 'off', spellcheck: 'false', placeholder: 'event id' });
    const form = h('form', { id: 'lookup-form', class: 'row', role: 'search',
      onsubmit: (ev) => { ev.preventDefault(); runLookup(input.value.trim(), true); } },
      [h('label', { for: 'lookup-id', text: 'Event id' }), input, h('button', { type: 'submit', text: 'Look up' })]);
    clear(panels.lookup.body).appendChild(form);
    panels.lookup.body.appendChild(h('div', { id: 'lookup-result', 'aria-live': 'polite' }));
    const q = new URLSearchParams(location.search).get('lookup');
    if (q && q.trim()) runLookup(q.trim(), false);
  }

  // Drops every data-* attribute from #lookup-result, sets data-state, empties it.
  function resetResult(state) {
    const res = byId('lookup-result');
    Array.from(res.attributes).filter((a) => a.name.indexOf('data-') === 0).forEach((a) => res.removeAttribute(a.name));
    res.setAttribute('data-state', state);
    return clear(res);
  }

  async function runLookup(id, updateUrl) {
    if (!id) return;
    const seq = ++lookupSeq;
    byId('lookup-id').value = id;
    if (updateUrl) window.history.replaceState(null, '', '?lookup=' + encodeURIComponent(id));
    resetResult('loading').textContent = 'Looking up ' + id + ' …';
    let r;
    try { r = await api('events/' + encodeURIComponent(id)); } catch (e) { r = { status: 0, ok: false, body: { error: e.message } }; }
    if (seq !== lookupSeq) return; // a newer lookup started meanwhile
    if (r.ok && r.body) renderLookup(r.body);
    else lookupFailed(r.status ? errText(r) : 'Request failed: ' + r.body.error, r.status);
  }

  function lookupFailed(msg, status) {
    const res = resetResult('error');
    res.setAttribute('data-found', 'false');
    if (status) res.setAttribute('data-status', String(status));
    res.appendChild(h('p', { class: 'lookup-message', text: msg }));
  }

  function renderLookup(e) {
    if (e.unroutable) { renderUnroutable(e); return; }
    const res = resetResult('done');
    const k = e.kafka || { found: false }, x = e.expected, row = e.row, m = { mono: true };
    // Where the sink holds it: Kafka's partition and offset, or JetStream's stream sequence.
    // found === null: the sink's messages cannot be read back, so it is not known.
    const place = k.in === 'JetStream' ? ' · stream sequence ' + k.offset
      : ' · partition ' + k.partition + ' · offset ' + k.offset;
    const where = k.found ? k.topic + place : null, inWhat = k.in || 'Kafka';
    res.setAttribute('data-found', k.found === null ? 'unknown' : String(!!k.found));
    if (k.found) {
      res.setAttribute('data-topic', String(k.topic));
      res.setAttribute('data-partition', String(k.partition));
      res.setAttribute('data-offset', String(k.offset));
    }
    if (typeof e.confirmed === 'boolean') res.setAttribute('data-confirmed', String(e.confirmed));
    res.appendChild(h('p', { class: 'lookup-message',
      text: k.found ? 'Found in ' + inWhat + ': ' + where
        : k.found === null ? 'Not known whether the ' + inWhat + ' sink has it: searched ' + k.searched
        : 'Not found in ' + inWhat + (k.searched ? ' (searched ' + k.searched + ')' : '') }));
    res.appendChild(group('Event', [['id', e.id, m],
      ['outbox row', row ? row.table + ' · created ' + fmtTime(row.created) : 'not in an outbox table (any more)'],
      ['expected', x ? x.topic + ' · partition ' + dash(x.partition) + ' · key ' + dash(x.key) : null, m],
      ['in ' + inWhat, k.found ? where : k.found === null ? 'not known' : 'not found', m],
      [inWhat + ' timestamp', k.found ? fmtTime(k.timestamp) : null],
      ['confirmed', typeof e.confirmed === 'boolean' ? yesNo(e.confirmed) : 'unknown'], ['note', e.note]]));
  }

  // A row the router refuses: in no routed topic, so nothing was searched.
  function renderUnroutable(e) {
    const res = resetResult('done'), u = e.unroutable, m = { mono: true };
    res.setAttribute('data-found', 'false');
    res.setAttribute('data-unroutable', 'true');
    res.appendChild(h('p', { class: 'lookup-message', text: 'Unroutable: ' + u.reason }));
    res.appendChild(group('Event', [['id', e.id, m], ['outbox row', e.row ? e.row.table : null, m],
      ['dead letter topic', u.dead_letter_topic, m], ['note', e.note]]));
  }

  /* ---------- actions (only while overview.actions is true) ---------- */
  function showActions(enabled) {
    if (enabled === actionsShown) return;
    actionsShown = enabled;
    panels.actions.sec.hidden = !enabled;
    if (!enabled) { clearTimeout(actionTimer); return; }
    if (!byId('action-token')) buildActions();
    pollActions();
  }

  function buildActions() {
    const btn = (kind, label) => h('button', { type: 'button', id: 'action-' + kind, class: 'action-button', text: label,
      onclick: () => startAction(kind) });
    const body = clear(panels.actions.body);
    body.appendChild(h('p', { class: 'muted', text: 'The token stays in this page only (never stored) and is sent as a bearer token.' }));
    body.appendChild(h('form', { id: 'action-form', class: 'row', onsubmit: (ev) => ev.preventDefault() }, [
      h('label', { for: 'action-token', text: 'Token' }), h('input', { id: 'action-token', type: 'password', autocomplete: 'off' }),
      h('label', { for: 'action-since', text: 'Since' }), h('input', { id: 'action-since', type: 'text', value: '1h', size: 6, class: 'mono' }),
      btn('replay-dry-run', 'Replay dry run'), btn('audit', 'Audit')]));
    body.appendChild(h('p', { id: 'action-status', role: 'status' }));
    body.appendChild(h('pre', { id: 'action-output', class: 'output', hidden: true }));
  }

  function authHeaders(extra) {
    const given = byId('action-token').value || token;
    const headers = Object.assign({ Accept: 'application/json' }, extra);
    if (given) headers.Authorization = 'Bearer ' + given;
    return headers;
  }

  function setActionStatus(text, isError) {
    const st = byId('action-status');
    st.className = isError ? 'panel-error' : '';
    st.textContent = text;
  }

  async function startAction(kind) {
    if (!byId('action-token').value && !token) { setActionStatus('Enter the token first.', true); return; }
    const since = byId('action-since').value.trim() || '1h';
    setActionStatus('Starting ' + kind + ' …');
    let r;
    try {
      r = await api('actions/' + kind, { method: 'POST', headers: authHeaders({ 'Content-Type': 'application/json' }),
        body: JSON.stringify({ since: since, until: null }) });
    } catch (e) { setActionStatus('Request failed: ' + e.message, true); return; }
    if (!r.ok) { setActionStatus(errText(r), true); return; }
    pollActions();
  }

  async function pollActions() {
    clearTimeout(actionTimer);
    if (!actionsShown) return;
    let r;
    try { r = await api('actions', { headers: authHeaders() }); } catch (e) { r = { status: 0, body: { error: e.message } }; }
    if (!r.ok || !r.body) { setActionStatus('Cannot read the action state: ' + errText(r), true); return; }
    renderAction(r.body.current, r.body.enabled);
    if (r.body.current && r.body.current.running) actionTimer = setTimeout(pollActions, 2000);
  }

  function renderAction(cur, enabled) {
    const out = byId('action-output'), running = !!(cur && cur.running);
    document.querySelectorAll('.action-button').forEach((b) => { b.disabled = running || enabled === false; });
    byId('action-status').setAttribute('data-running', String(running));
    if (!cur) {
      setActionStatus(enabled === false ? 'Actions are disabled on the server.' : 'No action has run yet.');
      out.hidden = true;
      return;
    }
    setActionStatus(cur.kind + ' started ' + fmtTime(cur.started_at) + ' — ' +
      (running ? 'running…' : 'finished, exit code ' + dash(cur.exit_code)));
    out.hidden = false;
    out.textContent = (cur.output || []).join('\n');
  }

  /* ---------- start ---------- */
  function start() {
    buildLayout();
    renderHistory({ samples: [] });
    buildLookup();
    every(5000, refresher(['overview'], 'overview', renderOverview,
      (e) => setStatus('unknown', 'Cannot reach the relay API (' + e.message + '); showing the last known values.')));
    every(5000, refresher(['charts'], 'history', renderHistory));
    every(5000, refresher(['problems', 'dead-letters'], 'problems', renderProblems));
    every(15000, refresher(['tables'], 'tables', renderTables));
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
}());
