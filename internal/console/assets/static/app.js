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
  function drawChart(h) {
    var svg = document.getElementById('backlog-chart');
    if (!svg || h.length < 2) return;
    var w = 800, ht = 180, pad = 4, top = 1;
    h.forEach(function (s) { top = Math.max(top, s.pending + s.in_flight, s.parked); });
    function pts(val) {
      return h.map(function (s, i) {
        var x = pad + (w - 2 * pad) * i / (h.length - 1);
        var y = Math.max(pad, ht - pad - (ht - 2 * pad) * val(s) / top);
        return x.toFixed(1) + ',' + y.toFixed(1);
      }).join(' ');
    }
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    [['l-backlog', function (s) { return s.pending + s.in_flight; }], ['l-parked', function (s) { return s.parked; }]].forEach(function (l) {
      var p = document.createElementNS(svgNS, 'polyline');
      p.setAttribute('class', l[0]);
      p.setAttribute('points', pts(l[1]));
      svg.appendChild(p);
    });
    var t = document.createElementNS(svgNS, 'text');
    t.setAttribute('x', '8'); t.setAttribute('y', '16'); t.setAttribute('class', 'axis');
    t.textContent = fmtNum(top);
    svg.appendChild(t);
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
    set('rate', h.length ? h[h.length - 1].dispatch_per_second.toFixed(1) + '/s' : '—');
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
        tr.appendChild(cell(fmtNum(tc.rows), 'n'));
        tb.appendChild(tr);
      });
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
