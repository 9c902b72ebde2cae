// drainer console: the progressive layer. Pages work without it; with it,
// the overview updates itself from /api/v1/stats every few seconds.
'use strict';
(function () {
  var page = document.body.getAttribute('data-page');
  if (page !== 'overview') return;
  var every = 2000;

  function fmtNum(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ','); }
  function fmtAge(s) {
    if (!(s > 0)) return '0s';
    if (s < 60) return Math.floor(s) + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
    if (s < 172800) return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
    return Math.floor(s / 86400) + 'd' + Math.floor((s % 86400) / 3600) + 'h';
  }
  function set(name, text) {
    var el = document.querySelector('[data-stat="' + name + '"]');
    if (el) el.textContent = text;
  }
  function cell(text, cls) {
    var td = document.createElement('td');
    if (cls) td.className = cls;
    td.textContent = text;
    return td;
  }
  function tone(el, cls) {
    if (!el) return;
    el.classList.remove('ok', 'warn', 'bad');
    el.classList.add(cls);
  }
  var svgNS = 'http://www.w3.org/2000/svg';
  // The chart's geometry and axes, as the server draws them (chart.go).
  var W = 960, H = 220, L = 64, R = W - 16, T = 12, B = H - 44, XTICKS = 5;
  function niceCeil(n) {
    for (var p = 1; ; p *= 10) {
      for (var m of [1, 2, 5]) { if (m * p >= n) return m * p; }
    }
  }
  function el(svg, name, attrs, text) {
    var e = document.createElementNS(svgNS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    svg.appendChild(e);
    return e;
  }
  function drawChart(h) {
    var svg = document.getElementById('backlog-chart');
    if (!svg || h.length < 2) return;
    var most = 0;
    h.forEach(function (s) { most = Math.max(most, s.pending + s.in_flight, s.parked); });
    var step = niceCeil(Math.max(1, Math.ceil(most / 4)));
    var top = Math.max(step, Math.ceil(most / step) * step);
    var t0 = Date.parse(h[0].at), t1 = Date.parse(h[h.length - 1].at);
    function xOf(i, at) {
      var f = t1 > t0 ? (Date.parse(at) - t0) / (t1 - t0) : i / (h.length - 1);
      return L + (R - L) * f;
    }
    function yOf(v) { return Math.max(T, B - (B - T) * v / top); }
    function pts(val) {
      return h.map(function (s, i) { return xOf(i, s.at).toFixed(1) + ',' + yOf(val(s)).toFixed(1); }).join(' ');
    }
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var gy = el(svg, 'g', { 'class': 'axis axis-y' });
    el(gy, 'line', { x1: L, y1: T, x2: L, y2: B });
    for (var v = 0; v <= top; v += step) {
      var y = yOf(v).toFixed(1);
      el(gy, 'line', { 'class': 'grid', x1: L, y1: y, x2: R, y2: y });
      el(gy, 'text', { 'class': 'tick', x: L - 6, y: (Number(y) + 4).toFixed(1), 'text-anchor': 'end' }, fmtNum(v));
    }
    el(gy, 'text', { 'class': 'axis-title', transform: 'translate(14 ' + ((T + B) / 2).toFixed(1) + ') rotate(-90)', 'text-anchor': 'middle' }, 'rows');
    var gx = el(svg, 'g', { 'class': 'axis axis-x' });
    el(gx, 'line', { x1: L, y1: B, x2: R, y2: B });
    for (var i = 0; i < XTICKS; i++) {
      var f = i / (XTICKS - 1), x = (L + (R - L) * f).toFixed(1);
      var at = new Date(t0 + f * (t1 - t0)).toISOString().substring(11, 19);
      el(gx, 'line', { x1: x, y1: B, x2: x, y2: B + 5 });
      el(gx, 'text', { 'class': 'tick', x: x, y: B + 18, 'text-anchor': i === 0 ? 'start' : i === XTICKS - 1 ? 'end' : 'middle' }, at);
    }
    el(gx, 'text', { 'class': 'axis-title', x: ((L + R) / 2).toFixed(1), y: H - 6, 'text-anchor': 'middle' }, 'time (UTC)');
    [['l-backlog', function (s) { return s.pending + s.in_flight; }], ['l-parked', function (s) { return s.parked; }]].forEach(function (l) {
      el(svg, 'polyline', { 'class': l[0], points: pts(l[1]) });
    });
  }
  function update(st) {
    var by = st.rows_by_status || {};
    ['pending', 'in_flight', 'outcome_unknown', 'compensation_failed'].forEach(function (k) { set(k, fmtNum(by[k] || 0)); });
    tone(document.querySelector('[data-stat="pending"]').parentNode, (by.pending || 0) > 0 ? 'warn' : 'ok');
    tone(document.querySelector('[data-stat="outcome_unknown"]').parentNode, (by.outcome_unknown || 0) > 0 ? 'bad' : 'ok');
    tone(document.querySelector('[data-stat="compensation_failed"]').parentNode, (by.compensation_failed || 0) > 0 ? 'bad' : 'ok');
    set('oldest', fmtAge(st.oldest_pending_age_seconds));
    tone(document.querySelector('[data-stat="oldest"]').parentNode, st.oldest_pending_age_seconds > 60 ? 'bad' : 'ok');
    var h = st.history || [];
    set('rate', h.length && st.drained_here !== false ? (st.requests_per_second || 0).toFixed(1) + '/s' : '—');
    if (h.length >= 2) set('span', 'the last ' + fmtAge((Date.parse(h[h.length - 1].at) - Date.parse(h[0].at)) / 1000));
    var rt = document.querySelector('#rates tbody');
    if (rt) {
      rt.textContent = '';
      Object.keys(st.dispatch_rates || {}).sort().forEach(function (k) {
        var v = st.dispatch_rates[k];
        if (!(v > 0)) return;
        var tr = document.createElement('tr');
        tr.appendChild(cell(k)); tr.appendChild(cell(v.toFixed(1) + '/s', 'n'));
        rt.appendChild(tr);
      });
      if (!rt.firstChild) {
        var tr0 = document.createElement('tr');
        var td0 = cell('No dispatch in the last interval.', 'muted'); td0.colSpan = 2; tr0.appendChild(td0); rt.appendChild(tr0);
      }
    }
    set('sampled_at', st.sampled_at ? st.sampled_at.replace('T', ' ').replace(/\.\d+/, '') : '—');
    set('rows_by_database_read_at', st.rows_by_database_read_at ? st.rows_by_database_read_at.replace('T', ' ').replace(/\.\d+/, '') : '—');
    document.querySelectorAll('#by-status td[data-status]').forEach(function (td) {
      td.textContent = fmtNum(by[td.getAttribute('data-status')] || 0);
    });
    var tb = document.querySelector('#by-tool tbody');
    if (tb) {
      tb.textContent = '';
      (st.rows_by_tool || []).forEach(function (tc) {
        var tr = document.createElement('tr');
        var a = document.createElement('a');
        a.href = '/rows?tool=' + encodeURIComponent(tc.tool_name) + (st.database && st.rows_by_database ? '&database=' + encodeURIComponent(st.database) : '');
        a.textContent = tc.tool_name;
        var td = document.createElement('td'); td.appendChild(a); tr.appendChild(td);
        var sp = document.createElement('span'); sp.className = 'st st-' + tc.status; sp.textContent = tc.status;
        td = document.createElement('td'); td.appendChild(sp); tr.appendChild(td);
        if (tc.status === 'pending' && (st.unrouted_tools || []).indexOf(tc.tool_name) >= 0) {
          // The pending rows of a tool no route names: they wait for one.
          var nr = document.createElement('a');
          nr.className = 'badge warn'; nr.textContent = 'no route'; nr.setAttribute('data-no-route', tc.tool_name);
          nr.title = 'no route in the loaded config names this tool: its rows wait';
          nr.href = '/rows?status=pending&tool=' + encodeURIComponent(tc.tool_name) + (st.database && st.rows_by_database ? '&database=' + encodeURIComponent(st.database) : '');
          td.appendChild(document.createTextNode(' ')); td.appendChild(nr);
        }
        tr.appendChild(cell(fmtNum(tc.rows), 'n'));
        tb.appendChild(tr);
      });
      if (st.other_tools > 0) {
        // The tools past the largest ones, summed.
        var rest = 0;
        Object.keys(st.other_tool_rows || {}).forEach(function (k) { rest += st.other_tool_rows[k]; });
        var tm = document.createElement('tr');
        tm.setAttribute('data-other-tools', String(st.other_tools));
        var tdm = cell('and ' + fmtNum(st.other_tools) + ' more tools', 'muted'); tdm.colSpan = 2; tm.appendChild(tdm);
        tm.appendChild(cell(fmtNum(rest), 'n'));
        tb.appendChild(tm);
      }
      if (!tb.firstChild) {
        var tr = document.createElement('tr');
        var td = cell(st.rows_by_database && !st.database ? 'Choose a database to see its work by tool.' : 'No work waiting.', 'muted');
        td.colSpan = 3; tr.appendChild(td); tb.appendChild(tr);
      }
    }
    // A fleet: each database's published counts.
    (st.rows_by_database || []).forEach(function (b) {
      var tr = document.querySelector('#by-database tr[data-database="' + CSS.escape(b.name) + '"]');
      if (!tr) return;
      var by = b.rows_by_status || {};
      var vals = { pending: by.pending || 0, in_flight: by.in_flight || 0, parked: (by.outcome_unknown || 0) + (by.compensation_failed || 0),
        failed: by.failed || 0, succeeded: by.succeeded || 0 };
      tr.querySelectorAll('td[data-col]').forEach(function (td) {
        var k = td.getAttribute('data-col');
        if (k in vals) td.textContent = fmtNum(vals[k]);
        else if (k === 'state') td.textContent = b.state;
        else if (k === 'oldest') td.textContent = fmtAge(b.oldest_pending_age_seconds);
        else if (k === 'sampled') td.textContent = b.sample_age_seconds == null ? 'never' : fmtAge(b.sample_age_seconds) + ' ago';
      });
    });
    drawChart(h);
  }
  function poll() {
    fetch('/api/v1/stats' + window.location.search, { credentials: 'same-origin', headers: { 'Accept': 'application/json' } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (st) { if (st) update(st); })
      .catch(function () { /* the next poll tries again */ })
      .finally(function () { setTimeout(poll, every); });
  }
  setTimeout(poll, every);
})();
