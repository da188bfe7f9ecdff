// The trace viewer. The trace is indexed once (typed arrays and per-branch lists), and every
// view is drawn from that index: the event list renders only the rows in view, so a trace of
// 100,000 events costs as much DOM as one of a hundred.
'use strict';
(function () {
  // Heights in px; they must match --row and --lane in the styles.
  const ROW_H = 22;
  const LANE_H = 20;
  // Up to this many lanes each get a DOM row (tests and find-in-page see them all); beyond,
  // lanes are drawn only while in view.
  const LANE_DOM_CAP = 1000;
  const OVERSCAN = 16;
  const SUMMARY_CHARS = 240;
  // Branches start collapsed past this many lanes: a 100-way `par` then reads as one fork
  // with a hundred one-line branches.
  const EXPAND_LANES = 24;
  // A fork with more branches than this draws the first GROUP_SHOWN in the timeline and one
  // row for the rest, until that row is opened.
  const GROUP_LANES = 200;
  const GROUP_SHOWN = 20;
  // About this many call bars per lane across the visible range (short calls close together
  // are merged).
  const CALL_BARS = 120;
  // The narrowest range the timeline zooms to.
  const MIN_ZOOM_US = 10;

  const FLAG_CANCELLED = 1;
  const FLAG_PROBLEM = 2;
  const PROBLEMS = '!problems';

  const byId = (id) => document.getElementById(id);
  const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  const esc = (value) => String(value).replace(/[&<>"']/g, (c) => ESCAPES[c]);
  const clip = (text, n) => (text.length > n ? text.slice(0, n) + '…' : text);
  const isNum = (x) => typeof x === 'number' && isFinite(x);
  const int = (x) => (isNum(x) ? x.toLocaleString('en-US') : '—');
  const count = (n, one, many) => `${int(n)} ${n === 1 ? one : many}`;

  // --------------------------------------------------------------------------------------
  // Formatting
  // --------------------------------------------------------------------------------------

  // The units of `agent trace summary` (its human_duration): `842 µs`, `68.5 ms`, `7.02 s`,
  // `7 min 01 s`, `2 h 05 min`.
  function fmtDur(us) {
    if (!isNum(us) || us < 0) return '—';
    if (us < 1000) return Math.round(us) + ' µs';
    if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 2 : 1) + ' ms';
    if (us < 60e6) return (us / 1e6).toFixed(2) + ' s';
    const two = (n) => String(n).padStart(2, '0');
    if (us < 3600e6) {
      const secs = Math.floor(us / 1e6);
      return Math.floor(secs / 60) + ' min ' + two(secs % 60) + ' s';
    }
    const mins = Math.floor(us / 60e6);
    return Math.floor(mins / 60) + ' h ' + two(mins % 60) + ' min';
  }

  // Offsets from the start of the trace, for the time column and the axis.
  function fmtRel(us) {
    if (!isNum(us)) return '?';
    if (us < 1e6) return '+' + (us / 1000).toFixed(1) + 'ms';
    if (us < 600e6) return '+' + (us / 1e6).toFixed(3) + 's';
    return '+' + (us / 60e6).toFixed(2) + 'min';
  }

  // Money is integer micro-dollars in traces.
  function fmtCost(micro) {
    if (!isNum(micro) || micro < 0) return '—';
    if (micro === 0) return '$0';
    const d = micro / 1e6;
    if (d >= 100) return '$' + d.toFixed(2);
    if (d >= 0.01) return '$' + d.toFixed(4);
    return '$' + d.toFixed(6).replace(/0+$/, '');
  }

  function fmtFinish(reason) {
    if (typeof reason === 'string') return reason;
    if (reason && typeof reason === 'object' && 'other' in reason) return 'other: ' + reason.other;
    return JSON.stringify(reason);
  }

  function compact(value) {
    try {
      const text = JSON.stringify(value);
      return text === undefined ? '' : text;
    } catch (e) {
      return String(value);
    }
  }

  // --------------------------------------------------------------------------------------
  // Times: µs since the epoch. Date.parse keeps milliseconds only, and traces hold µs and ns.
  // --------------------------------------------------------------------------------------

  const TIME_RE = /^(\d{4,}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:?\d\d)?$/;
  const secondCache = new Map();

  function parseTime(text) {
    if (typeof text !== 'string') return NaN;
    const m = TIME_RE.exec(text);
    if (!m) return Date.parse(text) * 1000;
    // Events of a run share few distinct seconds; Date.parse is the slow part.
    const key = m[1].replace(/[t ]/, 'T') + (m[3] ? m[3].toUpperCase() : 'Z');
    let base = secondCache.get(key);
    if (base === undefined) {
      base = Date.parse(key) * 1000;
      if (secondCache.size > 50000) secondCache.clear();
      secondCache.set(key, base);
    }
    return m[2] ? base + Number('0.' + m[2]) * 1e6 : base;
  }

  // --------------------------------------------------------------------------------------
  // Trace ids: `root.2.0`. Lanes sort by path, numbers by value, as `TraceId` orders them.
  // --------------------------------------------------------------------------------------

  const DIGITS = /^\d+$/;

  function compareIds(a, b) {
    const x = a.split('.');
    const y = b.split('.');
    for (let i = 0; i < Math.min(x.length, y.length); i++) {
      if (x[i] === y[i]) continue;
      if (DIGITS.test(x[i]) && DIGITS.test(y[i])) {
        const p = x[i].replace(/^0+/, '');
        const q = y[i].replace(/^0+/, '');
        if (p.length !== q.length) return p.length - q.length;
        if (p !== q) return p < q ? -1 : 1;
      }
      return x[i] < y[i] ? -1 : 1;
    }
    return x.length - y.length;
  }

  function parentId(id) {
    const dot = id.lastIndexOf('.');
    if (dot <= 0 || !DIGITS.test(id.slice(dot + 1))) return null;
    return id.slice(0, dot);
  }

  function shortId(id) {
    const dot = id.indexOf('.');
    return dot > 0 ? id.slice(dot) : id;
  }

  // --------------------------------------------------------------------------------------
  // The index
  // --------------------------------------------------------------------------------------

  function newLane(id) {
    return {
      id: id,
      events: [],
      first: Infinity,
      last: -Infinity,
      cancelled: false,
      won: false,
      errors: 0,
      failedTools: 0,
      calls: 0,
      tools: 0,
      inTok: 0,
      outTok: 0,
      cost: 0,
      pricedCalls: 0,
      cancelAt: NaN,
      depth: 0,
      parent: -1,
      fork: null,
      // Model and tool calls as [start, end, kind (0 model, 1 tool), event] (µs since t0),
      // the forks it made as {event, kids: [lane…]}, what it runs (models and tools by name).
      bars: [],
      forks: [],
      runs: new Map(),
      what: '',
    };
  }

  function buildModel(trace) {
    const entries = Array.isArray(trace.events) ? trace.events : [];
    const n = entries.length;
    const laneOf = new Int32Array(n);
    const at = new Float64Array(n);
    const typeOf = new Uint16Array(n);
    const flags = new Uint8Array(n);
    const types = [];
    const typeIx = new Map();
    const lanes = [];
    const laneIx = new Map();
    const branchOf = new Map();
    const joinAt = new Map();
    const winners = new Set();
    const totals = {
      events: n, calls: 0, tools: 0, inTok: 0, outTok: 0, cost: 0, costUnknown: 0,
      discardedCost: 0, discardedCalls: 0, errors: 0, failedTools: 0, denied: 0,
    };
    let minAt = Infinity;
    let maxAt = -Infinity;
    // Calls under way in each lane (a lane's calls run one after another): [start event].
    const openModel = [];
    const openTool = [];

    for (let i = 0; i < n; i++) {
      const entry = entries[i] || {};
      const ev = entry.event || {};
      const id = typeof entry.trace_id === 'string' ? entry.trace_id : '(no id)';
      let li = laneIx.get(id);
      if (li === undefined) {
        li = lanes.length;
        laneIx.set(id, li);
        lanes.push(newLane(id));
      }
      const lane = lanes[li];
      laneOf[i] = li;
      lane.events.push(i);
      const t = parseTime(ev.at);
      at[i] = t;
      if (t < minAt) minAt = t;
      if (t > maxAt) maxAt = t;
      if (t < lane.first) lane.first = t;
      if (t > lane.last) lane.last = t;
      const type = typeof ev.type === 'string' ? ev.type : '?';
      let ti = typeIx.get(type);
      if (ti === undefined) {
        ti = types.length;
        typeIx.set(type, ti);
        types.push({ name: type, count: 0 });
      }
      typeOf[i] = ti;
      types[ti].count++;
      const cancelled = entry.cancelled === true;
      if (cancelled) {
        lane.cancelled = true;
        flags[i] |= FLAG_CANCELLED;
      }
      const d = ev.data && typeof ev.data === 'object' ? ev.data : {};
      const named = (name) => {
        if (typeof name === 'string' && name) lane.runs.set(name, (lane.runs.get(name) || 0) + 1);
      };
      switch (type) {
        case 'infer_start':
          totals.calls++;
          lane.calls++;
          if (cancelled) totals.discardedCalls++;
          named(d.model);
          openModel[li] = i;
          break;
        case 'infer_end': {
          if (openModel[li] !== undefined) {
            lane.bars.push([openModel[li], i, 0]);
            openModel[li] = undefined;
          }
          const inTok = isNum(d.input_tokens) ? d.input_tokens : 0;
          const outTok = isNum(d.output_tokens) ? d.output_tokens : 0;
          totals.inTok += inTok;
          totals.outTok += outTok;
          lane.inTok += inTok;
          lane.outTok += outTok;
          if (isNum(d.cost)) {
            totals.cost += d.cost;
            lane.cost += d.cost;
            lane.pricedCalls++;
            if (cancelled) totals.discardedCost += d.cost;
          }
          break;
        }
        case 'tool_call':
          totals.tools++;
          lane.tools++;
          named(d.name);
          openTool[li] = i;
          break;
        case 'tool_result':
          if (openTool[li] !== undefined) {
            lane.bars.push([openTool[li], i, 1]);
            openTool[li] = undefined;
          }
          if (d.success === false) {
            totals.failedTools++;
            lane.failedTools++;
            flags[i] |= FLAG_PROBLEM;
          }
          break;
        case 'tool_denied':
          totals.denied++;
          flags[i] |= FLAG_PROBLEM;
          break;
        case 'exhausted':
        case 'timed_out':
          flags[i] |= FLAG_PROBLEM;
          break;
        case 'error':
          totals.errors++;
          lane.errors++;
          flags[i] |= FLAG_PROBLEM;
          break;
        case 'run_end':
          // The run's own account of how it ended (format version 3).
          if (entry.trace_id === trace.id) totals.runEnd = d;
          if (d.outcome !== 'succeeded') flags[i] |= FLAG_PROBLEM;
          break;
        case 'fork':
          if (Array.isArray(d.branch_ids)) {
            d.branch_ids.forEach((bid, k) => {
              if (typeof bid === 'string' && !branchOf.has(bid)) {
                branchOf.set(bid, { event: i, index: k, kind: d.kind, lane: li });
              }
            });
          }
          break;
        case 'join':
          if (Array.isArray(d.branch_ids)) {
            for (const bid of d.branch_ids) if (!joinAt.has(bid)) joinAt.set(bid, t);
          }
          if (isNum(d.winner) && Array.isArray(d.branch_ids) && d.branch_ids[d.winner] !== undefined) {
            winners.add(d.branch_ids[d.winner]);
          }
          break;
      }
    }
    // As `Trace::spend` counts: a call is of unknown cost until its end reports one.
    let priced = 0;
    for (const lane of lanes) {
      priced += lane.pricedCalls;
      lane.costUnknown = Math.max(0, lane.calls - lane.pricedCalls);
    }
    totals.costUnknown = Math.max(0, totals.calls - priced);

    for (const lane of lanes) {
      lane.depth = lane.id.split('.').length - 1;
      lane.won = winners.has(lane.id);
      const info = branchOf.get(lane.id);
      if (info && info.lane !== laneIx.get(lane.id)) {
        lane.fork = info;
        lane.parent = info.lane;
      } else {
        const p = parentId(lane.id);
        lane.parent = p !== null && laneIx.has(p) ? laneIx.get(p) : -1;
      }
    }
    const order = lanes.map((_, i) => i).sort((a, b) => compareIds(lanes[a].id, lanes[b].id));
    // A cancelled branch was stopped when its fork was decided (the join), or with the
    // cancelled branch it is nested in; the trace records no event for the moment itself.
    for (const li of order) {
      const lane = lanes[li];
      if (!lane.cancelled) continue;
      const own = joinAt.get(lane.id);
      lane.cancelAt = isNum(own) ? own : lane.parent >= 0 ? lanes[lane.parent].cancelAt : NaN;
    }
    const laneRank = new Int32Array(lanes.length);
    order.forEach((li, k) => {
      laneRank[li] = k;
    });
    // A call with no end ran until its branch was cancelled, or until the branch's last event.
    lanes.forEach((lane, li) => {
      const stop = isNum(lane.cancelAt) ? Math.max(lane.cancelAt, lane.last) : lane.last;
      for (const open of [openModel[li], openTool[li]]) {
        if (open !== undefined) lane.bars.push([open, -1, open === openModel[li] ? 0 : 1]);
      }
      lane.bars = lane.bars
        .map(([s, e, kind]) => [at[s], e >= 0 ? at[e] : stop, kind, s])
        .filter((b) => isNum(b[0]) && isNum(b[1]))
        .sort((a, b) => a[0] - b[0]);
      const names = [...lane.runs.keys()];
      lane.what = names.length <= 2 ? names.join(' → ') : `${names[0]} → ${names[1]} +${names.length - 2}`;
    });
    // Each lane's forks and their branches, in id order.
    const forkKids = new Map();
    for (const li of order) {
      const f = lanes[li].fork;
      if (f === null) continue;
      if (!forkKids.has(f.event)) forkKids.set(f.event, []);
      forkKids.get(f.event).push(li);
    }
    for (const [event, kids] of [...forkKids.entries()].sort((a, b) => a[0] - b[0])) {
      lanes[laneOf[event]].forks.push({ event, kids });
    }

    const start = parseTime(trace.start);
    const end = parseTime(trace.end);
    const t0 = isNum(start) ? Math.min(start, isNum(minAt) ? minAt : start) : (isNum(minAt) ? minAt : 0);
    const tEnd = Math.max(isNum(end) ? end : -Infinity, isNum(maxAt) ? maxAt : t0);
    // One definition with `agent trace summary` (Trace::wall_time): what run_end recorded,
    // else start to end, else start to the latest event.
    const origin = isNum(start) ? start : t0;
    const wall = totals.runEnd && isNum(totals.runEnd.duration_us) ? totals.runEnd.duration_us
      : isNum(end) && isNum(start) ? end - start : (isNum(maxAt) ? maxAt - origin : 0);
    totals.wall = wall;
    totals.lanes = lanes.length;
    totals.cancelledLanes = lanes.filter((l) => l.cancelled).length;

    // Trees start at lanes that no fork of another lane lists (the run, or orphans of a
    // streamed file); the order of `order` keeps them in id order.
    const roots = order.filter((li) => lanes[li].fork === null);

    return {
      trace, entries, n, laneOf, at, typeOf, flags, types, typeIx, lanes, laneIx, order, laneRank, roots,
      totals, t0, span: Math.max(tEnd - t0, 1), hay: null,
    };
  }

  // --------------------------------------------------------------------------------------
  // State
  // --------------------------------------------------------------------------------------

  let M = null;
  const view = {
    query: '',
    type: '',
    hideCancelled: false,
    branch: -1,
    collapsed: new Set(),
    // Rows of the event tree: kind 0 = event (ref: its index), 1 = branch (ref: its lane),
    // 2 = a branch a fork listed that recorded nothing (ref: index into `ghosts`).
    rowKind: [],
    rowRef: [],
    rowDepth: [],
    ghosts: [],
    laneCount: null,
    matches: 0,
    selKind: -1,
    selRef: -1,
    drawn: '',
    lanesDrawn: '',
    // The timeline: its rows (a lane, or -1 - g for group g), groups, each lane's row, the
    // forks whose group was opened, and the zoomed range (µs since the start) or null.
    tlRows: [],
    tlGroups: [],
    laneRow: null,
    openGroups: new Set(),
    zoom: null,
  };

  const typeName = (i) => M.types[M.typeOf[i]].name;
  const dataOf = (i) => {
    const ev = M.entries[i].event;
    return ev && ev.data && typeof ev.data === 'object' ? ev.data : {};
  };

  // --------------------------------------------------------------------------------------
  // Totals
  // --------------------------------------------------------------------------------------

  function renderTotals() {
    const T = M.totals;
    const el = byId('totals');
    const attrs = {
      events: T.events, calls: T.calls, tools: T.tools, inputTokens: T.inTok,
      outputTokens: T.outTok, costMicro: T.cost, costUnknownCalls: T.costUnknown,
      wallUs: Math.round(T.wall), errors: T.errors, failedTools: T.failedTools,
      cancelled: T.cancelledLanes, lanes: T.lanes,
    };
    for (const key in attrs) el.dataset[key] = String(attrs[key]);
    const stat = (label, value, note, cls) =>
      `<div class="stat${cls ? ' ' + cls : ''}"><span>${esc(label)}</span><b>${esc(value)}</b>` +
      (note ? `<small>${esc(note)}</small>` : '') + '</div>';
    const costNote = [];
    if (T.costUnknown) costNote.push(`${int(T.costUnknown)} call(s) unknown`);
    if (T.discardedCost) costNote.push(`${fmtCost(T.discardedCost)} in cancelled branches`);
    el.innerHTML =
      stat('Events', int(T.events)) +
      stat('Model calls', int(T.calls), T.discardedCalls ? `${int(T.discardedCalls)} cancelled` : '') +
      stat('Tool calls', int(T.tools), T.failedTools ? `${int(T.failedTools)} failed` : '', T.failedTools ? 'bad' : '') +
      stat('Input tokens', int(T.inTok)) +
      stat('Output tokens', int(T.outTok)) +
      stat('Cost', (T.costUnknown && !T.cost ? '?' : fmtCost(T.cost)) + (T.costUnknown && T.cost ? '+' : ''), costNote.join(', ')) +
      stat('Wall time', fmtDur(T.wall)) +
      stat('Errors', int(T.errors), T.denied ? `${int(T.denied)} tool(s) denied` : '', T.errors ? 'bad' : '') +
      stat('Cancelled branches', int(T.cancelledLanes), `of ${count(T.lanes, 'lane', 'lanes')}`, T.cancelledLanes ? 'cancel' : '');
  }

  function renderMeta() {
    const tr = M.trace;
    const parts = [];
    if (typeof tr.id === 'string') parts.push(`<code>${esc(tr.id)}</code>`);
    if (typeof tr.parent_id === 'string') parts.push(`forked from <code>${esc(tr.parent_id)}</code>`);
    if (typeof tr.start === 'string') parts.push(`started ${esc(tr.start)}`);
    parts.push(typeof tr.end === 'string' ? `ended ${esc(tr.end)}` : 'no end recorded');
    byId('trace-meta').innerHTML = parts.join(' · ');
    // How the run ended, from its run_end: a failed run must not look like a success.
    const out = byId('outcome');
    const R = M.totals.runEnd;
    out.dataset.outcome = R ? String(R.outcome) : 'unknown';
    if (!R) {
      out.textContent = 'Outcome not recorded: the run did not finish, or its trace predates run_end.';
      out.className = 'unknown';
    } else if (R.error && typeof R.error === 'object') {
      out.innerHTML = `<b>Run ${esc(R.outcome)}</b> <span class="kind">${esc(R.error.kind)}</span> ` +
        `<span class="errtext">${esc(R.error.message)}</span>`;
      out.className = 'bad';
    } else {
      out.innerHTML = `<b>Run ${esc(R.outcome)}</b>` +
        (typeof R.value_preview === 'string' ? ` <span class="value">${esc(R.value_preview)}</span>` : '');
      out.className = 'good';
    }
  }

  // --------------------------------------------------------------------------------------
  // Timeline
  // --------------------------------------------------------------------------------------

  // The visible range, in µs since the run's start: the whole run unless zoomed.
  const range = () => (view.zoom ? view.zoom : [0, M.span]);
  // Where `t` (µs since the start) falls on a track, in percent of its width.
  const pct = (t) => {
    const [from, to] = range();
    return ((t - from) / Math.max(to - from, 1e-3)) * 100;
  };

  function renderAxis() {
    const axis = byId('axis');
    const width = axis.clientWidth || 800;
    const [from, to] = range();
    const span = Math.max(to - from, 1e-3);
    const target = span / Math.max(2, Math.floor(width / 110));
    const pow = Math.pow(10, Math.floor(Math.log10(target)));
    const step = [1, 2, 5, 10].map((k) => k * pow).find((s) => s >= target) || 10 * pow;
    let html = '';
    for (let t = Math.ceil(from / step) * step; t <= to + 1e-6 && html.length < 20000; t += step) {
      html += `<span class="tick" data-us="${Math.round(t)}" style="left:${pct(t).toFixed(3)}%">${esc(fmtDur(t))}</span>`;
    }
    axis.innerHTML = html;
    const box = byId('timeline');
    box.dataset.viewFrom = String(Math.round(from));
    box.dataset.viewTo = String(Math.round(to));
    byId('zoom-range').textContent = view.zoom ? `${fmtRel(from)} – ${fmtRel(to)} of ${fmtDur(M.span)}` : '';
    byId('zoom-reset').hidden = !view.zoom;
  }

  // Which lanes the timeline draws, in tree order: what the event tree's collapsing and
  // filter leave, with the branches of a very wide fork grouped after the first few. Returns
  // whether that changed (a click that only selects must not redraw the lanes: the second
  // click of a double click would land on a new element and never make a `dblclick`).
  function rebuildTimeline() {
    const rows = [];
    const groups = [];
    const rowOfLane = new Int32Array(M.lanes.length).fill(-1);
    const seen = new Uint8Array(M.lanes.length);
    const active = filtering();
    const shown = (li) => !active || (view.laneCount !== null && view.laneCount[li] > 0);
    function walk(li) {
      if (seen[li]) return;
      seen[li] = 1;
      if (!shown(li)) return;
      rowOfLane[li] = rows.length;
      rows.push(li);
      if (view.collapsed.has(li)) return;
      for (const fork of M.lanes[li].forks) {
        const kids = active ? fork.kids.filter(shown) : fork.kids;
        if (kids.length <= GROUP_LANES || view.openGroups.has(fork.event)) {
          for (const kid of kids) walk(kid);
          continue;
        }
        for (const kid of kids.slice(0, GROUP_SHOWN)) walk(kid);
        const rest = kids.slice(GROUP_SHOWN);
        for (const kid of rest) seen[kid] = 1;
        rows.push(-1 - groups.length);
        groups.push({ event: fork.event, parent: li, lanes: rest });
      }
    }
    const roots = view.branch >= 0 ? [view.branch] : M.roots;
    for (const li of roots) walk(li);
    if (view.branch < 0) for (const li of M.order) if (!seen[li]) walk(li);
    const same = rows.length === view.tlRows.length && rows.every((r, k) => r === view.tlRows[k]) &&
      groups.length === view.tlGroups.length &&
      groups.every((g, k) => g.lanes.length === view.tlGroups[k].lanes.length);
    view.tlRows = rows;
    view.tlGroups = groups;
    view.laneRow = rowOfLane;
    if (!same) view.lanesDrawn = '';
    return !same;
  }

  // The calls of a lane as bars within the visible range. Short calls close together are
  // merged into one bar ("12 calls", its kind `mixed` when it holds both), so a lane draws
  // about CALL_BARS bars however many calls it made; zooming in separates them.
  function callBars(L) {
    const [from, to] = range();
    const span = Math.max(to - from, 1e-3);
    const px = span / Math.max(byId('axis').clientWidth || 800, 100);
    const bucket = Math.max(px, span / CALL_BARS);
    let html = '';
    let cur = null;
    const flush = () => {
      if (!cur) return;
      const left = pct(cur[0] - M.t0);
      const width = Math.max(pct(cur[1] - M.t0) - left, 0);
      const d = dataOf(cur[3]);
      const kind = cur[2] === 0 ? 'model' : cur[2] === 1 ? 'tool' : 'mixed';
      const what = cur[2] === 0 ? `model ${d.model || ''}` : `tool ${d.name || ''}`;
      const tip = cur[4] > 1 ? `${int(cur[4])} calls over ${fmtDur(cur[1] - cur[0])}: zoom in to tell them apart`
        : `${what} · ${fmtDur(cur[1] - cur[0])}`;
      html += `<i class="call ${kind}" data-event="${cur[3]}" data-calls="${cur[4]}" ` +
        `style="left:${left.toFixed(3)}%;width:${width.toFixed(3)}%" title="${esc(tip)}"></i>`;
      cur = null;
    };
    for (const b of L.bars) {
      const s = b[0] - M.t0;
      const e = b[1] - M.t0;
      if (e < from || s > to) continue;
      if (cur && b[1] - b[0] < bucket && b[0] - cur[1] < bucket && b[1] - cur[0] < 2 * bucket) {
        cur[1] = Math.max(cur[1], b[1]);
        if (cur[2] !== b[2]) cur[2] = 2;
        cur[4]++;
        continue;
      }
      flush();
      cur = [b[0], b[1], b[2], b[3], 1];
    }
    flush();
    return html;
  }

  // The lane rows in (or near) the timeline's view; only they get call bars, so a trace of
  // 100 lanes × 400 calls does not put 40,000 bars in the page.
  function visibleRows() {
    const scroll = byId('lanes-scroll');
    const first = Math.max(0, Math.floor(scroll.scrollTop / LANE_H) - OVERSCAN);
    const last = Math.ceil((scroll.scrollTop + (scroll.clientHeight || 300)) / LANE_H) + OVERSCAN;
    return [first, last];
  }

  // Adds call bars to the drawn lanes that came into view without them.
  function fillCalls() {
    const box = byId('lanes');
    const [first, last] = visibleRows();
    for (let k = first; k < Math.min(last, box.children.length); k++) {
      const el = box.children[k];
      if (el.dataset.calls !== undefined || el.dataset.lane === undefined) continue;
      const L = M.lanes[Number(el.dataset.lane)];
      const track = el.querySelector('.lane-track');
      if (track && !el.classList.contains('outside')) track.insertAdjacentHTML('beforeend', callBars(L));
      el.dataset.calls = '1';
    }
  }

  function laneHtml(li, top, calls) {
    const L = M.lanes[li];
    const first = isNum(L.first) ? L.first - M.t0 : 0;
    const last = isNum(L.last) ? L.last - M.t0 : first;
    const [from, to] = range();
    const outside = last < from || first > to;
    const cls = 'lane' + (L.cancelled ? ' cancelled' : '') + (L.won ? ' won' : '') +
      (L.errors ? ' error' : '') + (outside ? ' outside' : '') +
      (view.selKind === 1 && view.selRef === li ? ' selected' : '');
    const left = pct(first);
    const width = pct(last) - left;
    const badges = (L.cancelled ? '<span class="badge cancelled">cancelled</span>' : '') +
      (L.won ? '<span class="badge won">won</span>' : '') +
      (L.errors ? '<span class="badge error">error</span>' : '');
    const tip = `${L.id}${L.what ? ' · ' + L.what : ''}\nfrom ${fmtRel(first)} for ${fmtDur(last - first)}\n` +
      `${count(L.events.length, 'event', 'events')}, ${count(L.calls, 'model call', 'model calls')}, ${count(L.tools, 'tool call', 'tool calls')}, ${fmtCost(L.cost)}` +
      (L.cancelled ? '\ncancelled' : '') + (L.won ? '\nwon its race' : '');
    const style = top === null ? '' : ` style="position:absolute;left:0;right:0;top:${top}px"`;
    const name = L.depth ? shortId(L.id) : L.id;
    return `<div class="${cls}" data-lane="${li}" data-id="${esc(L.id)}" data-depth="${L.depth}"` +
      ` data-start-us="${Math.round(first)}" data-end-us="${Math.round(last)}"` +
      `${calls ? ' data-calls="1"' : ''} title="${esc(tip)}"${style}>` +
      `<div class="lane-label" style="padding-left:${6 + Math.min(L.depth, 12) * 10}px">` +
      `${esc(name)}${L.what ? ` <span class="what">${esc(L.what)}</span>` : ''}${badges}</div>` +
      `<div class="lane-track"><div class="bar" style="left:${left.toFixed(3)}%;width:${Math.max(width, 0).toFixed(3)}%"></div>` +
      (outside || !calls ? '' : callBars(L)) + tailHtml(L, last) + '</div></div>';
  }

  // The branches of a wide fork past the first few, as one row that opens on a click.
  function groupHtml(g, top) {
    const G = view.tlGroups[g];
    let first = Infinity;
    let last = -Infinity;
    let cancelled = 0;
    let failed = 0;
    for (const li of G.lanes) {
      const L = M.lanes[li];
      if (L.first < first) first = L.first;
      if (L.last > last) last = L.last;
      if (L.cancelled) cancelled++;
      if (L.errors) failed++;
    }
    first = isNum(first) ? first - M.t0 : 0;
    last = isNum(last) ? last - M.t0 : first;
    const left = pct(first);
    const width = pct(last) - left;
    const depth = M.lanes[G.parent].depth + 1;
    const notes = (cancelled ? ` <span class="badge cancelled">${int(cancelled)} cancelled</span>` : '') +
      (failed ? ` <span class="badge error">${int(failed)} failed</span>` : '');
    const style = top === null ? '' : ` style="position:absolute;left:0;right:0;top:${top}px"`;
    return `<div class="lane group" data-group="${g}" data-lanes="${G.lanes.length}"` +
      ` title="${esc(`${int(G.lanes.length)} more branches of this fork: click to show them`)}"${style}>` +
      `<div class="lane-label" style="padding-left:${6 + Math.min(depth, 12) * 10}px">▸ ` +
      `${esc(count(G.lanes.length, 'more branch', 'more branches'))}${notes}</div>` +
      `<div class="lane-track"><div class="bar" style="left:${left.toFixed(3)}%;width:${Math.max(width, 0).toFixed(3)}%"></div></div></div>`;
  }

  // From a cancelled branch's last event to the moment it was stopped.
  function tailHtml(L, last) {
    const stop = L.cancelAt - M.t0;
    if (!isNum(stop) || stop <= last) return '';
    const left = pct(last);
    const width = pct(stop) - left;
    return `<div class="tail" style="left:${left.toFixed(3)}%;width:${width.toFixed(3)}%" ` +
      `title="running until cancelled at ${esc(fmtRel(stop))}"></div>`;
  }

  const rowHtmlOf = (row, top, calls) => (row >= 0 ? laneHtml(row, top, calls) : groupHtml(-1 - row, top));

  function renderLanes(force) {
    const box = byId('lanes');
    const rows = view.tlRows;
    const hidden = M.lanes.length - rows.filter((r) => r >= 0).length;
    byId('lane-count').textContent = `${int(M.lanes.length)} lane${M.lanes.length === 1 ? '' : 's'} (run and branches)` +
      (hidden ? `, ${int(hidden)} not drawn (collapsed, grouped or filtered out)` : '');
    box.dataset.laneCount = String(M.lanes.length);
    box.dataset.rows = String(rows.length);
    if (rows.length <= LANE_DOM_CAP) {
      if (!force && view.lanesDrawn === 'all') return;
      box.style.height = '';
      const [vf, vl] = visibleRows();
      box.innerHTML = rows.map((r, k) => rowHtmlOf(r, null, k >= vf && k < vl)).join('');
      view.lanesDrawn = 'all';
      return;
    }
    const scroll = byId('lanes-scroll');
    const first = Math.max(0, Math.floor(scroll.scrollTop / LANE_H) - OVERSCAN);
    const last = Math.min(rows.length, Math.ceil((scroll.scrollTop + (scroll.clientHeight || 300)) / LANE_H) + OVERSCAN);
    const key = first + ':' + last;
    if (!force && view.lanesDrawn === key) return;
    box.style.height = rows.length * LANE_H + 'px';
    let html = '';
    for (let k = first; k < last; k++) html += rowHtmlOf(rows[k], k * LANE_H, true);
    box.innerHTML = html;
    view.lanesDrawn = key;
  }

  // Zooms to [from, to] (µs since the start), kept within the run; `null` shows it all.
  function setZoom(from, to) {
    if (from === null) {
      view.zoom = null;
    } else {
      const span = Math.min(Math.max(to - from, MIN_ZOOM_US), M.span);
      from = Math.min(Math.max(from, 0), M.span - span);
      view.zoom = span >= M.span ? null : [from, from + span];
    }
    renderAxis();
    renderLanes(true);
    if (M.ready) saveHash();
  }

  // --------------------------------------------------------------------------------------
  // Search and filters
  // --------------------------------------------------------------------------------------

  function buildHaystack(upTo) {
    if (!M.hay) M.hay = { text: new Array(M.n), done: 0 };
    const H = M.hay;
    const end = Math.min(upTo, M.n);
    for (let i = H.done; i < end; i++) {
      const entry = M.entries[i];
      const ev = entry.event || {};
      H.text[i] = (typeName(i) + ' ' + M.lanes[M.laneOf[i]].id + ' ' + compact(ev.data)).toLowerCase();
    }
    if (end > H.done) H.done = end;
  }

  // Indexes the search text while the page is idle, so the first search does not stall.
  function indexWhenIdle() {
    const idle = window.requestIdleCallback || ((f) => setTimeout(() => f({ timeRemaining: () => 8 }), 16));
    const step = (deadline) => {
      const done = M.hay ? M.hay.done : 0;
      if (done >= M.n) return;
      let upTo = done;
      do {
        upTo += 2000;
        buildHaystack(upTo);
      } while (upTo < M.n && deadline.timeRemaining() > 4);
      if (upTo < M.n) idle(step);
    };
    idle(step);
  }

  function filtering() {
    return view.query !== '' || view.type !== '' || view.hideCancelled;
  }

  function makeMatcher() {
    const q = view.query;
    const ti = view.type === '' || view.type === PROBLEMS ? -1 : M.typeIx.has(view.type) ? M.typeIx.get(view.type) : -2;
    const problems = view.type === PROBLEMS;
    const hide = view.hideCancelled;
    if (q) buildHaystack(M.n);
    const hay = q ? M.hay.text : null;
    return (i) => {
      if (hide && M.flags[i] & FLAG_CANCELLED) return false;
      if (ti !== -1 && M.typeOf[i] !== ti) return false;
      if (problems && !(M.flags[i] & FLAG_PROBLEM)) return false;
      if (q && hay[i].indexOf(q) < 0) return false;
      return true;
    };
  }

  // --------------------------------------------------------------------------------------
  // The event tree
  // --------------------------------------------------------------------------------------

  function rebuildRows() {
    const kind = [];
    const ref = [];
    const depthOf = [];
    const ghosts = [];
    const laneCount = new Int32Array(M.lanes.length);
    const visited = new Uint8Array(M.lanes.length);
    const active = filtering();
    const matches = makeMatcher();
    let total = 0;

    // Returns how many events of the lane's subtree match; rows are emitted only while
    // `emit` (a collapsed branch still counts its matches for its header).
    function walk(li, depth, emit) {
      if (visited[li]) return 0;
      visited[li] = 1;
      const lane = M.lanes[li];
      const head = kind.length;
      if (emit) {
        kind.push(1);
        ref.push(li);
        depthOf.push(depth);
      }
      const open = emit && !view.collapsed.has(li);
      let count = 0;
      const evs = lane.events;
      for (let k = 0; k < evs.length; k++) {
        const i = evs[k];
        if (matches(i)) {
          count++;
          if (open) {
            kind.push(0);
            ref.push(i);
            depthOf.push(depth + 1);
          }
        }
        if (typeName(i) !== 'fork') continue;
        const ids = dataOf(i).branch_ids;
        if (!Array.isArray(ids)) continue;
        for (const bid of ids) {
          const bl = M.laneIx.get(bid);
          if (bl === undefined || M.lanes[bl].fork === null || M.lanes[bl].fork.event !== i) {
            if (open && !active && bl === undefined) {
              kind.push(2);
              ref.push(ghosts.length);
              depthOf.push(depth + 1);
              ghosts.push(String(bid));
            }
            continue;
          }
          count += walk(bl, depth + 1, open);
        }
      }
      laneCount[li] = count;
      if (emit && active && count === 0) {
        kind.length = head;
        ref.length = head;
        depthOf.length = head;
      }
      return count;
    }

    const roots = view.branch >= 0 ? [view.branch] : M.roots;
    for (const li of roots) total += walk(li, 0, true);
    // Lanes that only a cycle of forks reaches are still shown, at the top level.
    if (view.branch < 0) {
      for (const li of M.order) if (!visited[li]) total += walk(li, 0, true);
    }
    view.rowKind = kind;
    view.rowRef = ref;
    view.rowDepth = depthOf;
    view.ghosts = ghosts;
    view.laneCount = laneCount;
    view.matches = total;
    view.drawn = '';
    byId('events-spacer').style.height = kind.length * ROW_H + 'px';
    const shown = active || view.branch >= 0;
    byId('match-count').textContent = shown
      ? `${int(total)} of ${count(M.n, 'event', 'events')}`
      : `${count(M.n, 'event', 'events')} · ${count(kind.length, 'row', 'rows')}`;
    byId('match-count').dataset.matches = String(total);
    // The timeline follows what the tree shows.
    if (rebuildTimeline()) renderLanes(true);
  }

  function eventSummary(i) {
    const d = dataOf(i);
    const s = (x) => (x === undefined || x === null ? '' : String(x));
    const quoted = (x) => (x ? '“' + s(x) + '”' : '');
    switch (typeName(i)) {
      case 'infer_start':
        return [s(d.model), `${s(d.messages)} msg`, d.tools ? `${d.tools} tools` : '', quoted(d.prompt_preview)];
      case 'infer_end':
        return [s(d.model), `${int(d.input_tokens)}→${int(d.output_tokens)} tok`,
          isNum(d.cost) ? fmtCost(d.cost) : 'cost ?', fmtDur(d.duration_us), fmtFinish(d.finish_reason),
          d.tool_calls ? `${d.tool_calls} tool call(s)` : '', quoted(d.response_preview)];
      case 'context': {
        const c = { kept: 0, shrunk: 0, dropped: 0 };
        for (const sec of Array.isArray(d.sections) ? d.sections : []) if (sec && sec.outcome in c) c[sec.outcome]++;
        return [s(d.model), `${int(d.tokens_before)}→${int(d.tokens_after)} of ${int(d.available)} tok`,
          `${c.kept} kept, ${c.shrunk} shrunk, ${c.dropped} dropped`];
      }
      case 'tool_call':
        return [`${s(d.name)}(${clip(compact(d.args), 160)})`];
      case 'tool_result':
        return [(d.success === false ? '✗ ' : '✓ ') + s(d.name), fmtDur(d.duration_us), quoted(d.output_preview)];
      case 'tool_denied':
        return [`${s(d.name)} refused by scope ${s(d.scope)}`];
      case 'state_read':
      case 'state_write':
        return [s(d.key)];
      case 'fork':
        return [`${s(d.kind)} × ${s(d.branch_count)}`];
      case 'join': {
        const ids = Array.isArray(d.branch_ids) ? d.branch_ids : [];
        return [s(d.kind), isNum(d.winner) ? `winner ${shortId(s(ids[d.winner]))}` : ''];
      }
      case 'checkpoint':
        return [s(d.name)];
      case 'exhausted':
        return [`${s(d.resource)}: spent ${int(d.spent)} of ${int(d.limit)}`];
      case 'timeout':
      case 'timed_out':
        return [`${int(d.limit)} ms`];
      case 'steering':
        return [s(d.message)];
      case 'remember':
        return [s(d.id), quoted(d.content_preview)];
      case 'recall':
        return [`${int(d.results)} result(s)`, quoted(d.query_preview)];
      case 'forget':
        return [s(d.id), d.existed ? 'existed' : 'did not exist'];
      case 'custom':
        return [s(d.name), clip(compact(d.data), 160)];
      case 'error':
        return [s(d.message)];
      case 'run_end':
        return [s(d.outcome), d.error ? `${s(d.error.kind)}: ${s(d.error.message)}` : quoted(d.value_preview)];
      default:
        return [clip(compact(d), 200)];
    }
  }

  function rowHtml(r) {
    const kind = view.rowKind[r];
    const ref = view.rowRef[r];
    const pad = 4 + view.rowDepth[r] * 14;
    if (kind === 2) {
      return `<div class="row ghost" data-row="${r}" style="padding-left:${pad}px"><span class="tw"></span>` +
        `<span class="id">${esc(view.ghosts[ref])}</span> · no events (never started)</div>`;
    }
    if (kind === 1) {
      const L = M.lanes[ref];
      const open = !view.collapsed.has(ref);
      const sel = view.selKind === 1 && view.selRef === ref;
      const cls = 'row branch' + (L.cancelled ? ' cancelled' : '') + (sel ? ' selected' : '');
      const events = filtering()
        ? `${int(view.laneCount[ref])} of ${count(L.events.length, 'event', 'events')}`
        : count(L.events.length, 'event', 'events');
      const meta = [events];
      // What it runs says more than its place in the fork.
      if (L.what) meta.unshift(L.what);
      else if (L.fork) meta.push(`${L.fork.kind} branch ${L.fork.index}`);
      if (L.calls) meta.push(count(L.calls, 'model call', 'model calls'));
      if (L.tools) meta.push(count(L.tools, 'tool call', 'tool calls'));
      if (L.cost) meta.push(fmtCost(L.cost));
      if (isNum(L.first) && isNum(L.last)) meta.push(fmtDur(L.last - L.first));
      const badges = (L.cancelled ? '<span class="badge cancelled">cancelled</span>' : '') +
        (L.won ? '<span class="badge won">won</span>' : '') +
        (L.errors ? '<span class="badge error">error</span>' : '');
      return `<div class="${cls}" data-row="${r}" data-lane="${ref}" role="treeitem" aria-expanded="${open}" style="padding-left:${pad}px">` +
        `<span class="tw">${open ? '▾' : '▸'}</span><span class="id">${esc(L.id)}</span>${badges}` +
        `<span class="meta">${esc(meta.join(' · '))}</span></div>`;
    }
    const type = typeName(ref);
    const f = M.flags[ref];
    const sel = view.selKind === 0 && view.selRef === ref;
    const cls = 'row ev' + (f & FLAG_CANCELLED ? ' cancelled' : '') + (f & FLAG_PROBLEM ? ' error' : '') + (sel ? ' selected' : '');
    const parts = eventSummary(ref).filter((p) => p !== '');
    const text = clip(parts.join(' · '), SUMMARY_CHARS);
    return `<div class="${cls}" data-row="${r}" data-event="${ref}" data-type="${esc(type)}" role="treeitem" style="padding-left:${pad}px">` +
      `<span class="tw"></span><span class="at">${fmtRel(M.at[ref] - M.t0)}</span>` +
      `<span class="ty ${esc(type)}">${esc(type)}</span><span class="sum">${esc(text)}</span></div>`;
  }

  function renderRows(force) {
    const box = byId('events');
    const count = view.rowKind.length;
    const height = box.clientHeight || 600;
    const first = Math.max(0, Math.floor(box.scrollTop / ROW_H) - OVERSCAN);
    const last = Math.min(count, Math.ceil((box.scrollTop + height) / ROW_H) + OVERSCAN);
    const key = first + ':' + last;
    if (!force && view.drawn === key) return;
    view.drawn = key;
    let html = '';
    for (let r = first; r < last; r++) html += rowHtml(r);
    const rows = byId('event-rows');
    rows.style.transform = `translateY(${first * ROW_H}px)`;
    rows.innerHTML = html;
  }

  function refresh() {
    rebuildRows();
    renderRows(true);
  }

  // --------------------------------------------------------------------------------------
  // Navigation
  // --------------------------------------------------------------------------------------

  function rowOf(kind, ref) {
    for (let r = 0; r < view.rowKind.length; r++) {
      if (view.rowKind[r] === kind && view.rowRef[r] === ref) return r;
    }
    return -1;
  }

  function scrollToRow(r) {
    if (r < 0) return;
    const box = byId('events');
    const top = r * ROW_H;
    if (top < box.scrollTop || top + ROW_H > box.scrollTop + box.clientHeight) {
      box.scrollTop = Math.max(0, top - box.clientHeight / 3);
    }
  }

  function expandTo(li) {
    for (let l = li, guard = 0; l >= 0 && guard < 10000; l = M.lanes[l].parent, guard++) {
      view.collapsed.delete(l);
    }
  }

  // Shows an event or a branch in the tree (opening its ancestors) and selects it.
  function reveal(kind, ref) {
    const li = kind === 0 ? M.laneOf[ref] : ref;
    if (view.branch >= 0 && !isWithin(li, view.branch)) setBranch(-1);
    expandTo(kind === 0 ? li : M.lanes[li].parent);
    rebuildRows();
    select(kind, ref);
    scrollToRow(rowOf(kind, ref));
    renderRows(true);
  }

  function isWithin(li, ancestor) {
    for (let l = li, guard = 0; l >= 0 && guard < 10000; l = M.lanes[l].parent, guard++) {
      if (l === ancestor) return true;
    }
    return false;
  }

  function select(kind, ref) {
    view.selKind = kind;
    view.selRef = ref;
    // A branch of a wide fork's group is shown by opening the group.
    const li = kind === 0 ? M.laneOf[ref] : ref;
    const fork = M.lanes[li].fork;
    if (view.laneRow && view.laneRow[li] < 0 && fork && !view.openGroups.has(fork.event)) {
      view.openGroups.add(fork.event);
      rebuildTimeline();
      renderLanes(true);
    }
    if (M.ready) saveHash();
    renderDetails();
    renderRows(true);
    for (const el of byId('lanes').querySelectorAll('.lane.selected')) el.classList.remove('selected');
    if (kind === 1) {
      scrollLaneIntoView(ref);
      const el = byId('lanes').querySelector(`.lane[data-lane="${ref}"]`);
      if (el) el.classList.add('selected');
    }
  }

  function scrollLaneIntoView(li) {
    const box = byId('lanes-scroll');
    const row = view.laneRow ? view.laneRow[li] : -1;
    if (row < 0) return;
    const top = row * LANE_H;
    if (top < box.scrollTop || top + LANE_H > box.scrollTop + box.clientHeight) {
      box.scrollTop = Math.max(0, top - box.clientHeight / 3);
    }
    // Past the DOM cap, lanes come into view only when drawn; below it, their calls.
    if (view.tlRows.length <= LANE_DOM_CAP) fillCalls();
    else renderLanes(false);
  }

  function setBranch(li) {
    view.branch = li;
    const chip = byId('branch-filter');
    if (li < 0) {
      chip.hidden = true;
      chip.innerHTML = '';
    } else {
      chip.hidden = false;
      chip.innerHTML = `branch ${esc(M.lanes[li].id)}<button type="button" data-action="clear-branch" title="Show every branch">×</button>`;
    }
  }

  // --------------------------------------------------------------------------------------
  // Details
  // --------------------------------------------------------------------------------------

  const kv = (rows) =>
    '<dl class="kv">' + rows.filter((r) => r && r[1] !== undefined && r[1] !== '')
      .map(([k, v]) => `<dt>${esc(k)}</dt><dd>${v}</dd>`).join('') + '</dl>';
  const laneLink = (li) => `<a class="lane-link" data-goto-lane="${li}">${esc(M.lanes[li].id)}</a>`;
  const idLink = (id) => (M.laneIx.has(id) ? laneLink(M.laneIx.get(id)) : `<code>${esc(id)}</code> (no events)`);
  const eventLink = (i, label) => `<a class="lane-link" data-goto-event="${i}">${esc(label)}</a>`;
  const preview = (text) => `<div class="preview">${esc(text === undefined || text === null ? '' : text)}</div>`;
  // A piece of recorded content: inline, or its index in the page's content table.
  const piece = (v) => (isNum(v) && Array.isArray(M.trace.content) ? M.trace.content[v] : v);
  // A message as the model saw it: its role, its text, the tool calls it asked for.
  const messageHtml = (m) => {
    m = piece(m);
    if (!m || typeof m !== 'object') return preview('(missing)');
    const calls = Array.isArray(m.tool_calls) && m.tool_calls.length
      ? m.tool_calls.map((c) => `<div class="call">→ <code>${esc(c && c.name)}</code> ${esc(compact(c && c.arguments))}</div>`).join('')
      : '';
    const about = m.role === 'tool' ? ` <small>answers ${esc(m.tool_call_id)}</small>` : '';
    const attached = Array.isArray(m.attachments) ? m.attachments.map(attachmentHtml).join('') : '';
    return `<div class="msg ${esc(m.role)}"><span class="role">${esc(m.role)}</span>${about}` +
      `<div class="preview">${esc(m.content || '')}</div>${attached}${calls}</div>`;
  };
  // An image: a thumbnail when the trace kept its bytes (small images), else what it was.
  const attachmentHtml = (a) => {
    if (!a || a.type !== 'image') return `<div class="attachment">${esc(a && a.type)} attachment</div>`;
    const kb = isNum(a.size) ? (a.size >= 1024 ? `${(a.size / 1024).toFixed(1)} KB` : `${a.size} bytes`) : '';
    const about = `${esc(a.media_type)} · ${esc(kb)} · sha256:${esc(String(a.sha256 || '').slice(0, 12))}`;
    const safe = /^image\/(png|jpeg|gif|webp)$/.test(a.media_type) && typeof a.data === 'string' &&
      /^[A-Za-z0-9+/]*={0,2}$/.test(a.data);
    return `<figure class="attachment" data-sha256="${esc(a.sha256)}">` +
      (safe ? `<img class="thumb" alt="${about}" src="data:${a.media_type};base64,${a.data}">` : '') +
      `<figcaption>${about}${safe ? '' : ' (the trace keeps its hash, not its bytes)'}</figcaption></figure>`;
  };
  // A tool's whole output when the run recorded it (text as it is, JSON pretty), else its preview.
  const outputText = (d) => ('output' in d ? (typeof d.output === 'string' ? d.output : pretty(d.output)) : d.output_preview);
  // The whole request of a model call, when the run recorded content.
  const promptHtml = (p) => {
    if (!p || typeof p !== 'object' || !Array.isArray(p.messages)) return '';
    let html = `<h3>Prompt (${count(p.messages.length, 'message', 'messages')})</h3><div class="prompt">` +
      p.messages.map(messageHtml).join('') + '</div>';
    if (Array.isArray(p.tools) && p.tools.length) {
      html += '<h3>Tools offered</h3><ul class="tools">' + p.tools.map((t) => {
        t = piece(t) || {};
        return `<li><code>${esc(t.name)}</code> ${esc(t.description || '')}</li>`;
      }).join('') + '</ul>';
    }
    if (p.options && typeof p.options === 'object' && Object.keys(p.options).length) {
      html += '<h3>Options</h3>' + preview(pretty(p.options));
    }
    return html;
  };
  const pretty = (value) => {
    try {
      return JSON.stringify(value, null, 2);
    } catch (e) {
      return String(value);
    }
  };

  // The event of `type` paired with `i` in the same branch: the next one after a start, the
  // previous one before an end, with the same iteration when `sameIteration`.
  function partner(i, type, forward, sameIteration) {
    const evs = M.lanes[M.laneOf[i]].events;
    let lo = 0;
    let hi = evs.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (evs[mid] < i) lo = mid + 1;
      else hi = mid;
    }
    const iter = dataOf(i).iteration;
    const step = forward ? 1 : -1;
    const own = typeName(i);
    for (let k = lo + step; k >= 0 && k < evs.length; k += step) {
      const j = evs[k];
      const t = typeName(j);
      if (t === type && (!sameIteration || dataOf(j).iteration === iter)) return j;
      // Another event like this one comes first: this one has no partner.
      if (t === own) return -1;
    }
    return -1;
  }

  function sourceText(src) {
    if (!src || typeof src !== 'object') return compact(src);
    switch (src.kind) {
      case 'static': return 'static · ' + src.origin;
      case 'semantic': return 'semantic · score ' + (isNum(src.score) ? src.score.toFixed(2) : '?');
      case 'state': return 'state · ' + src.key;
      case 'conditional': return 'conditional · ' + src.condition;
      case 'summary': return 'summary of ' + (Array.isArray(src.of) ? src.of.join(', ') : '?');
      default: return String(src.kind);
    }
  }

  function outcomeText(o) {
    return o.outcome === 'dropped' ? `dropped: ${o.reason || o.error || '?'}` : String(o.outcome);
  }

  function contextDetails(d) {
    const sections = Array.isArray(d.sections) ? d.sections : [];
    const tools = Array.isArray(d.tools) ? d.tools : [];
    const sources = Array.isArray(d.sources) ? d.sources : [];
    const c = { kept: 0, shrunk: 0, dropped: 0 };
    for (const s of sections) if (s && s.outcome in c) c[s.outcome]++;
    let html = kv([
      ['model', esc(d.model)],
      ['encoding', esc(d.encoding)],
      ['tokens', `${int(d.tokens_before)} before → ${int(d.tokens_after)} sent`],
      ['available', `${int(d.available)} (budget ${int(d.budget)} − reserve ${int(d.reserve)})`],
      ['compression', isNum(d.compression_ratio) ? d.compression_ratio.toFixed(3) : '—'],
      ['sections', `${c.kept} kept, ${c.shrunk} shrunk, ${c.dropped} dropped`],
      ['hydrate / compile', `${fmtDur(d.hydrate_us)} / ${fmtDur(d.compile_us)}`],
    ]);
    html += `<h3>Sections (${sections.length})</h3><table class="grid"><tr><th>id</th><th>source</th><th>priority</th><th>tokens</th><th>outcome</th></tr>`;
    for (const s of sections) {
      if (!s || typeof s !== 'object') continue;
      html += `<tr class="${esc(s.outcome)}"><td><code>${esc(s.id)}</code></td><td>${esc(sourceText(s.source))}</td>` +
        `<td>${esc(s.priority)}</td><td class="n">${int(s.tokens_before)} → ${int(s.tokens_after)}</td>` +
        `<td class="out">${esc(outcomeText(s))}</td></tr>`;
    }
    html += '</table>';
    if (tools.length) {
      html += `<h3>Tools (${tools.length})</h3><table class="grid"><tr><th>name</th><th>priority</th><th>tokens</th><th>outcome</th></tr>`;
      for (const t of tools) {
        if (!t || typeof t !== 'object') continue;
        html += `<tr class="${esc(t.outcome)}"><td><code>${esc(t.name)}</code></td><td>${esc(t.priority)}</td>` +
          `<td class="n">${int(t.tokens)}</td><td class="out">${esc(outcomeText(t))}</td></tr>`;
      }
      html += '</table>';
    }
    if (sources.length) {
      html += `<h3>Sources (${sources.length})</h3><table class="grid"><tr><th>name</th><th>outcome</th><th>sections</th><th>time</th></tr>`;
      for (const s of sources) {
        if (!s || typeof s !== 'object') continue;
        const cls = s.outcome === 'dropped' ? 'dropped' : s.outcome === 'hydrated' ? 'kept' : '';
        html += `<tr class="${cls}"><td>${esc(s.name)}</td><td class="out">${esc(outcomeText(s))}</td>` +
          `<td class="n">${int(s.sections)}</td><td class="n">${fmtDur(s.elapsed_us)}</td></tr>`;
      }
      html += '</table>';
    }
    return html;
  }

  function eventDetails(i) {
    const entry = M.entries[i];
    const ev = entry.event || {};
    const d = dataOf(i);
    const type = typeName(i);
    const li = M.laneOf[i];
    let body = '';
    switch (type) {
      case 'infer_start': {
        const end = partner(i, 'infer_end', true, true);
        const e = end >= 0 ? dataOf(end) : null;
        body = kv([
          ['model', esc(d.model)],
          ['messages', int(d.messages)],
          ['tools offered', int(d.tools)],
          ['iteration', int(d.iteration)],
          ['latency', e ? fmtDur(e.duration_us) : 'no end recorded'],
          ['tokens', e ? `${int(e.input_tokens)} in, ${int(e.output_tokens)} out` : ''],
          ['cost', e ? (isNum(e.cost) ? fmtCost(e.cost) : 'unknown') : ''],
          ['finish reason', e ? esc(fmtFinish(e.finish_reason)) : ''],
          ['end', end >= 0 ? eventLink(end, 'infer_end →') : ''],
        ]) + (d.prompt ? promptHtml(d.prompt) : '<h3>Prompt (last message)</h3>' + preview(d.prompt_preview));
        if (e) body += '<h3>Response</h3>' + (e.reply !== undefined ? messageHtml(e.reply) : preview(e.response_preview));
        break;
      }
      case 'infer_end': {
        const start = partner(i, 'infer_start', false, true);
        body = kv([
          ['model', esc(d.model)],
          ['finish reason', esc(fmtFinish(d.finish_reason))],
          ['input tokens', int(d.input_tokens)],
          ['output tokens', int(d.output_tokens)],
          ['cost', isNum(d.cost) ? `${fmtCost(d.cost)} (${int(d.cost)} µ$)` : 'unknown'],
          ['latency', fmtDur(d.duration_us)],
          ['tool calls asked', int(d.tool_calls)],
          ['iteration', int(d.iteration)],
          ['start', start >= 0 ? eventLink(start, '← infer_start') : ''],
        ]) + '<h3>Response</h3>' + (d.reply !== undefined ? messageHtml(d.reply) : preview(d.response_preview));
        if (start >= 0) {
          const sd = dataOf(start);
          body += sd.prompt ? promptHtml(sd.prompt) : '<h3>Prompt (last message)</h3>' + preview(sd.prompt_preview);
        }
        break;
      }
      case 'context':
        body = contextDetails(d);
        break;
      case 'tool_call': {
        const res = partner(i, 'tool_result', true, false);
        const r = res >= 0 ? dataOf(res) : null;
        body = kv([
          ['tool', `<code>${esc(d.name)}</code>`],
          ['call id', d.call_id === undefined || d.call_id === null ? '' : `<code>${esc(d.call_id)}</code>`],
          ['iteration', int(d.iteration)],
          ['success', r ? (r.success === false ? '<span class="errtext">failed</span>' : '<span class="ok">yes</span>') : 'no result recorded'],
          ['duration', r ? fmtDur(r.duration_us) : ''],
          ['result', res >= 0 ? eventLink(res, 'tool_result →') : ''],
        ]) + '<h3>Arguments</h3>' + preview(pretty(d.args));
        if (r) body += '<h3>Result</h3>' + preview(outputText(r));
        break;
      }
      case 'tool_result': {
        const call = partner(i, 'tool_call', false, false);
        body = kv([
          ['tool', `<code>${esc(d.name)}</code>`],
          ['success', d.success === false ? '<span class="errtext">failed</span>' : '<span class="ok">yes</span>'],
          ['duration', fmtDur(d.duration_us)],
          ['iteration', int(d.iteration)],
          ['call', call >= 0 ? eventLink(call, '← tool_call') : ''],
        ]) + `<h3>${d.success === false ? 'Error' : 'Output'}</h3>` +
          preview(outputText(d));
        if (call >= 0) body += '<h3>Arguments</h3>' + preview(pretty(dataOf(call).args));
        break;
      }
      case 'tool_denied':
        body = kv([
          ['tool', `<code>${esc(d.name)}</code>`],
          ['refused by scope', esc(d.scope)],
          ['scope allows', esc(Array.isArray(d.allowed) ? d.allowed.join(', ') : '')],
          ['iteration', int(d.iteration)],
        ]);
        break;
      case 'fork':
      case 'join': {
        const ids = Array.isArray(d.branch_ids) ? d.branch_ids : [];
        body = kv([
          ['kind', esc(d.kind)],
          ['branches', int(ids.length)],
          ['winner', isNum(d.winner) ? idLink(String(ids[d.winner])) : ''],
        ]) + '<h3>Branches</h3><table class="grid">' + ids.map((id, k) => {
          const bl = M.laneIx.get(id);
          const L = bl === undefined ? null : M.lanes[bl];
          const status = !L ? 'never started' : [L.cancelled ? 'cancelled' : '', L.won ? 'won' : '', L.errors ? 'error' : ''].filter(Boolean).join(', ');
          return `<tr><td class="n">${k}</td><td>${idLink(String(id))}</td><td>${esc(status)}</td>` +
            `<td class="n">${L ? count(L.events.length, 'event', 'events') : ''}</td></tr>`;
        }).join('') + '</table>';
        break;
      }
      case 'error':
        body = '<h3>Message</h3><div class="preview errtext">' + esc(d.message) + '</div>';
        break;
      case 'run_end': {
        const sp = d.spent || {};
        body = kv([
          ['outcome', esc(d.outcome)],
          ['error kind', d.error ? esc(d.error.kind) : ''],
          ['model calls', int(sp.calls)],
          ['tokens', `${int(sp.input_tokens)} in / ${int(sp.output_tokens)} out`],
          ['cost', isNum(sp.cost) ? fmtCost(sp.cost) : 'unknown'],
          ['wall time', fmtDur(d.duration_us)],
        ]) + (d.error ? '<h3>Error</h3><div class="preview errtext">' + esc(d.error.message) + '</div>' : '') +
          (typeof d.value_preview === 'string' ? '<h3>Value</h3><div class="preview">' + esc(d.value_preview) + '</div>' : '');
        break;
      }
      default:
        body = kv(Object.keys(d).map((k) => [k, esc(typeof d[k] === 'string' ? d[k] : compact(d[k]))]));
    }
    const head = kv([
      ['at', `${esc(ev.at)} (${fmtRel(M.at[i] - M.t0)})`],
      ['branch', laneLink(li)],
      ['cancelled', entry.cancelled ? '<span class="badge cancelled">cancelled</span> its branch lost or was stopped' : ''],
      ['event', `#${i}`],
    ]);
    return `<h2><span class="ty ${esc(type)}">${esc(type)}</span></h2>${head}${body}` +
      `<details class="raw"><summary>JSON</summary><pre>${esc(pretty(entry))}</pre></details>`;
  }

  function laneDetails(li) {
    const L = M.lanes[li];
    const first = L.first - M.t0;
    const status = [L.cancelled ? '<span class="badge cancelled">cancelled</span>' : '',
      L.won ? '<span class="badge won">won its race</span>' : '',
      L.errors ? '<span class="badge error">failed</span>' : ''].join('');
    const origin = L.fork
      ? `branch ${L.fork.index} of a <b>${esc(L.fork.kind)}</b> in ${laneLink(L.fork.lane)} (${eventLink(L.fork.event, 'fork')})`
      : L.parent >= 0 ? `child of ${laneLink(L.parent)}` : 'the run';
    const children = new Set();
    for (const i of L.events) {
      if (typeName(i) !== 'fork') continue;
      const ids = dataOf(i).branch_ids;
      if (Array.isArray(ids)) for (const id of ids) children.add(String(id));
    }
    return `<h2><code>${esc(L.id)}</code> ${status}</h2>` + kv([
      ['is', origin],
      ['starts', fmtRel(first)],
      ['lasts', fmtDur(L.last - L.first)],
      ['events', int(L.events.length)],
      ['model calls', int(L.calls)],
      ['tool calls', int(L.tools) + (L.failedTools ? ` (${int(L.failedTools)} failed)` : '')],
      ['tokens', `${int(L.inTok)} in, ${int(L.outTok)} out`],
      ['cost', !L.costUnknown ? fmtCost(L.cost)
        : L.pricedCalls ? `${fmtCost(L.cost)} + ${count(L.costUnknown, 'call', 'calls')} of unknown cost`
          : `unknown (${count(L.costUnknown, 'call', 'calls')})`],
      ['errors', L.errors ? `<span class="errtext">${int(L.errors)}</span>` : '0'],
      ['branches forked', children.size ? int(children.size) : ''],
    ]) + `<p><button type="button" data-action="only-branch" data-lane="${li}">Show only this branch</button></p>`;
  }

  function renderDetails() {
    const el = byId('details');
    if (view.selKind === 0) el.innerHTML = eventDetails(view.selRef);
    else if (view.selKind === 1) el.innerHTML = laneDetails(view.selRef);
    else el.innerHTML = '<p class="hint">Click an event or a branch for its details.</p>';
  }

  // --------------------------------------------------------------------------------------
  // Wiring
  // --------------------------------------------------------------------------------------

  function renderTypeOptions() {
    const select = byId('type-filter');
    const known = M.types.slice().sort((a, b) => a.name.localeCompare(b.name));
    const problems = M.flags.reduce((n, f) => n + (f & FLAG_PROBLEM ? 1 : 0), 0);
    select.innerHTML = `<option value="">All types</option>` +
      `<option value="${PROBLEMS}">Problems (${int(problems)})</option>` +
      known.map((t) => `<option value="${esc(t.name)}">${esc(t.name)} (${int(t.count)})</option>`).join('');
  }

  function onFilterChange() {
    // A new filter shows every match: collapsed branches would hide them.
    view.collapsed.clear();
    byId('events').scrollTop = 0;
    refresh();
    saveHash();
  }

  // The view's filters and selection live in the URL's fragment (`#q=…&type=…&branch=…&event=…`),
  // so a view can be bookmarked or shared along with the file.
  function saveHash() {
    const p = new URLSearchParams();
    if (view.query) p.set('q', view.query);
    if (view.type) p.set('type', view.type);
    if (view.hideCancelled) p.set('hide-cancelled', '1');
    if (view.branch >= 0) p.set('branch', M.lanes[view.branch].id);
    if (view.selKind === 0) p.set('event', String(view.selRef));
    if (view.selKind === 1) p.set('lane', M.lanes[view.selRef].id);
    if (view.zoom) p.set('zoom', `${Math.round(view.zoom[0])}-${Math.round(view.zoom[1])}`);
    const hash = p.toString();
    try {
      history.replaceState(null, '', hash ? '#' + hash : location.pathname + location.search);
    } catch (e) {
      // Some embedders forbid it; the view works without.
    }
  }

  function loadHash() {
    const p = new URLSearchParams(location.hash.replace(/^#/, ''));
    view.query = (p.get('q') || '').trim().toLowerCase();
    view.type = p.get('type') || '';
    view.hideCancelled = p.get('hide-cancelled') === '1';
    byId('search').value = view.query;
    byId('type-filter').value = view.type;
    byId('hide-cancelled').checked = view.hideCancelled;
    // `zoom=FROM-TO`, in µs since the start.
    const zoom = /^(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)$/.exec(p.get('zoom') || '');
    view.zoom = null;
    if (zoom && Number(zoom[2]) > Number(zoom[1])) {
      const from = Math.max(0, Number(zoom[1]));
      const to = Math.min(M.span, Number(zoom[2]));
      if (to - from >= MIN_ZOOM_US && to - from < M.span) view.zoom = [from, to];
    }
    const branch = p.get('branch');
    setBranch(branch !== null && M.laneIx.has(branch) ? M.laneIx.get(branch) : -1);
    if (filtering() || view.branch >= 0) view.collapsed.clear();
    const event = Number(p.get('event'));
    if (p.get('event') !== null && Number.isInteger(event) && event >= 0 && event < M.n) return [0, event];
    const lane = p.get('lane');
    if (lane !== null && M.laneIx.has(lane)) return [1, M.laneIx.get(lane)];
    return null;
  }

  function toggle(li) {
    if (view.collapsed.has(li)) view.collapsed.delete(li);
    else view.collapsed.add(li);
    rebuildRows();
    renderRows(true);
  }

  function bind() {
    const events = byId('events');
    let pending = false;
    events.addEventListener('scroll', () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        renderRows(false);
      });
    });
    byId('event-rows').addEventListener('click', (e) => {
      const row = e.target.closest('.row');
      if (!row) return;
      events.focus({ preventScroll: true });
      if (row.dataset.event !== undefined) select(0, Number(row.dataset.event));
      else if (row.dataset.lane !== undefined) {
        const li = Number(row.dataset.lane);
        select(1, li);
        toggle(li);
      }
    });
    events.addEventListener('keydown', (e) => {
      const count = view.rowKind.length;
      if (!count) return;
      let r = view.selKind >= 0 ? rowOf(view.selKind, view.selRef) : -1;
      const onBranch = r >= 0 && view.rowKind[r] === 1;
      if (e.key === 'ArrowDown' || e.key === 'j') r = Math.min(count - 1, r + 1);
      else if (e.key === 'ArrowUp' || e.key === 'k') r = Math.max(0, r - 1);
      else if ((e.key === 'Enter' || e.key === ' ' || e.key === 'ArrowLeft' || e.key === 'ArrowRight') && onBranch) {
        const li = view.rowRef[r];
        const open = !view.collapsed.has(li);
        if (e.key === 'Enter' || e.key === ' ' || (e.key === 'ArrowLeft') === open) toggle(li);
        e.preventDefault();
        return;
      } else return;
      e.preventDefault();
      if (view.rowKind[r] === 2) r = Math.min(count - 1, r + 1);
      select(view.rowKind[r] === 0 ? 0 : 1, view.rowRef[r]);
      scrollToRow(r);
      renderRows(false);
    });
    byId('lanes').addEventListener('click', (e) => {
      // The end of a drag that panned the timeline is not a click on what it ends over.
      if (dragged) return;
      const call = e.target.closest('.call');
      if (call) {
        reveal(0, Number(call.dataset.event));
        return;
      }
      const group = e.target.closest('.group');
      if (group) {
        view.openGroups.add(view.tlGroups[Number(group.dataset.group)].event);
        rebuildTimeline();
        renderLanes(true);
        return;
      }
      const lane = e.target.closest('.lane');
      if (lane) reveal(1, Number(lane.dataset.lane));
    });
    // Zoom with the wheel over the tracks or the axis (around the pointer); pan with a drag,
    // shift+wheel or a sideways wheel; a double click or the button shows the whole run.
    const timeline = byId('timeline');
    // Where the pointer is along the track it is over, from 0 to 1.
    const trackX = (e) => {
      const el = e.target.closest('.lane-track, #axis') || byId('axis');
      const r = el.getBoundingClientRect();
      return Math.min(Math.max((e.clientX - r.left) / Math.max(r.width, 1), 0), 1);
    };
    timeline.addEventListener('wheel', (e) => {
      if (!e.target.closest('.lane-track, #axis')) return;
      e.preventDefault();
      const [from, to] = range();
      const span = to - from;
      if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
        const delta = e.shiftKey ? e.deltaY || e.deltaX : e.deltaX;
        setZoom(from + (delta / 500) * span, to + (delta / 500) * span);
        return;
      }
      const at = from + trackX(e) * span;
      const next = span * Math.exp(e.deltaY * 0.002);
      const frac = (at - from) / Math.max(span, 1e-3);
      setZoom(at - frac * next, at - frac * next + next);
    }, { passive: false });
    let drag = null;
    let dragged = false;
    timeline.addEventListener('mousedown', (e) => {
      if (e.button !== 0 || !e.target.closest('.lane-track, #axis')) return;
      const track = e.target.closest('.lane-track, #axis');
      drag = { x: e.clientX, range: range(), width: track.getBoundingClientRect().width };
      dragged = false;
    });
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      if (!dragged && Math.abs(dx) < 4) return;
      dragged = true;
      const width = Math.max(drag.width, 1);
      const [from, to] = drag.range;
      const shift = (-dx / width) * (to - from);
      setZoom(from + shift, to + shift);
    });
    window.addEventListener('mouseup', () => {
      drag = null;
      // The click that follows a drag's mouseup is ignored, then clicks count again.
      setTimeout(() => {
        dragged = false;
      }, 0);
    });
    timeline.addEventListener('dblclick', (e) => {
      if (e.target.closest('.lane-track, #axis')) setZoom(null);
    });
    byId('zoom-reset').addEventListener('click', () => setZoom(null));
    let lanePending = false;
    byId('lanes-scroll').addEventListener('scroll', () => {
      if (lanePending) return;
      lanePending = true;
      requestAnimationFrame(() => {
        lanePending = false;
        if (view.tlRows.length <= LANE_DOM_CAP) fillCalls();
        else renderLanes(false);
      });
    });
    byId('details').addEventListener('click', (e) => {
      const link = e.target.closest('[data-goto-lane],[data-goto-event],[data-action]');
      if (!link) return;
      if (link.dataset.gotoLane !== undefined) reveal(1, Number(link.dataset.gotoLane));
      else if (link.dataset.gotoEvent !== undefined) reveal(0, Number(link.dataset.gotoEvent));
      else if (link.dataset.action === 'only-branch') {
        setBranch(Number(link.dataset.lane));
        view.collapsed.clear();
        events.scrollTop = 0;
        refresh();
        saveHash();
      }
    });
    byId('branch-filter').addEventListener('click', (e) => {
      if (e.target.closest('[data-action="clear-branch"]')) {
        setBranch(-1);
        refresh();
        saveHash();
      }
    });
    let timer = 0;
    byId('search').addEventListener('input', (e) => {
      clearTimeout(timer);
      const value = e.target.value.trim().toLowerCase();
      timer = setTimeout(() => {
        if (value === view.query) return;
        view.query = value;
        onFilterChange();
      }, 150);
    });
    byId('type-filter').addEventListener('change', (e) => {
      view.type = e.target.value;
      onFilterChange();
    });
    byId('hide-cancelled').addEventListener('change', (e) => {
      view.hideCancelled = e.target.checked;
      onFilterChange();
    });
    byId('expand-all').addEventListener('click', () => {
      view.collapsed.clear();
      refresh();
    });
    byId('collapse-all').addEventListener('click', () => {
      collapseBranches();
      events.scrollTop = 0;
      refresh();
    });
    // Only edits by hand fire this (`replaceState` does not): apply them.
    window.addEventListener('hashchange', () => {
      const selected = loadHash();
      renderAxis();
      refresh();
      if (selected) reveal(selected[0], selected[1]);
    });
    window.addEventListener('resize', () => {
      renderAxis();
      renderLanes(true);
      renderRows(true);
    });
  }

  function collapseBranches() {
    view.collapsed.clear();
    M.lanes.forEach((lane, li) => {
      if (lane.fork !== null) view.collapsed.add(li);
    });
  }

  function problem(message) {
    const el = byId('problem');
    el.hidden = false;
    el.textContent = message;
  }

  // `data-render-ms` is read by the tests and the benchmark: time from navigation start to
  // the first frame painted with everything drawn. A timer queued from inside a frame
  // callback runs once that frame is painted.
  function markRendered(state) {
    requestAnimationFrame(() => setTimeout(() => {
      document.body.dataset.renderMs = performance.now().toFixed(1);
      document.body.dataset.rendered = state;
    }, 0));
  }

  // Where the first render's time goes (ms since navigation start), for the benchmark.
  const phases = { script: performance.now() };
  const phase = (name) => {
    phases[name] = performance.now();
    document.body.dataset.phases = Object.keys(phases).map((k) => k + ':' + phases[k].toFixed(1)).join(' ');
  };

  // The trace is `#trace-data` (all but its events) plus the `.trace-events` arrays in order.
  function loadTrace() {
    const head = byId('trace-data');
    if (!head) throw new Error('the page holds no trace');
    const trace = JSON.parse(head.textContent);
    if (!trace || typeof trace !== 'object') throw new Error('the page holds no trace');
    phase('header');
    const events = [];
    for (const el of document.querySelectorAll('script.trace-events')) {
      const chunk = JSON.parse(el.textContent);
      if (!Array.isArray(chunk)) throw new Error('a trace-events element is not an array');
      for (let k = 0; k < chunk.length; k++) events.push(chunk[k]);
    }
    trace.events = events;
    // Messages, tools and replies, each once; events name them by index.
    const content = byId('trace-content');
    trace.content = content ? JSON.parse(content.textContent) : [];
    if (!Array.isArray(trace.content)) throw new Error('the trace-content element is not an array');
    const expected = Number(head.dataset.events);
    if (head.dataset.events !== undefined && expected !== events.length) {
      problem(`The page is incomplete: it should hold ${expected} events and holds ${events.length}.`);
    }
    return trace;
  }

  function main() {
    let trace;
    try {
      trace = loadTrace();
      phase('parse');
    } catch (e) {
      problem('The embedded trace cannot be read: ' + e.message);
      markRendered('error');
      return;
    }
    if (typeof trace.error === 'string') problem(trace.error);
    M = buildModel(trace);
    phase('index');
    if (M.lanes.length > EXPAND_LANES) collapseBranches();
    renderMeta();
    renderTotals();
    renderTypeOptions();
    const selected = loadHash();
    renderAxis();
    rebuildRows();
    if (selected) reveal(selected[0], selected[1]);
    else renderRows(true);
    renderDetails();
    bind();
    phase('draw');
    M.ready = true;
    markRendered('1');
    indexWhenIdle();
  }

  try {
    main();
  } catch (e) {
    problem('The viewer failed: ' + (e && e.stack ? e.stack : e));
    document.body.dataset.error = String(e && e.message ? e.message : e);
    markRendered('error');
  }
})();
