/* Episode index: filters, sortable columns, per-policy means over the visible rows. Plain script (file://). */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var app = document.getElementById("app");
  var rows = D.rows;
  var sortKey = null, sortDir = 1;

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "class") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) { if (c != null) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return e;
  }
  function fmt(v, digits) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "number") return Math.abs(v) >= 1000 ? String(Math.round(v)) : v.toFixed(digits === undefined ? 3 : digits);
    return String(v);
  }
  function badge(v, yes, no) {
    if (v === null || v === undefined) return el("span", { class: "badge na", text: "n/a" });
    return el("span", { class: "badge " + (v ? "ok" : "bad"), text: v ? yes : no });
  }
  function uniq(list) { var s = {}; list.forEach(function (x) { if (x !== null && x !== undefined) s[x] = 1; }); return Object.keys(s).sort(); }

  // --- filters -------------------------------------------------------------------------------
  var evidenceTypes = uniq([].concat.apply([], rows.map(function (r) { return r.evidence_sources || []; })));
  var filters = [
    { id: "f-policy", label: "policy", options: [["", "all"]].concat(D.policies.map(function (p) { return [p, p]; })),
      test: function (r, v) { return r.policy === v; } },
    { id: "f-outcome", label: "outcome", options: [["", "all"], ["correct", "answer correct"], ["incorrect", "answer incorrect"],
      ["covered", "evidence covered"], ["missed", "evidence missed"]],
      test: function (r, v) {
        if (v === "correct") return r.correct === true; if (v === "incorrect") return r.correct === false;
        if (v === "covered") return r.covered === true; return r.covered === false; } },
    { id: "f-format", label: "answer format", options: [["", "all"]].concat(uniq(rows.map(function (r) { return r.answer_format; })).map(function (x) { return [x, x]; })),
      test: function (r, v) { return r.answer_format === v; } },
    { id: "f-evidence", label: "evidence type", options: [["", "all"]].concat(evidenceTypes.map(function (x) { return [x, x]; })),
      test: function (r, v) { return (r.evidence_sources || []).indexOf(v) >= 0; } },
    { id: "f-pages", label: "evidence pages", options: [["", "all"], ["single", "single-page"], ["multi", "multi-page"], ["none", "none (unanswerable)"]],
      test: function (r, v) { return r.page_scope === v; } }
  ];
  var bar = el("div", { class: "filters card" });
  filters.forEach(function (f) {
    var sel = el("select", { id: f.id });
    f.options.forEach(function (o) { sel.appendChild(el("option", { value: o[0], text: o[1] })); });
    sel.addEventListener("change", refresh);
    f.select = sel;
    bar.appendChild(el("label", {}, [f.label, sel]));
  });
  var search = el("input", { id: "f-text", type: "search", placeholder: "question / episode id" });
  search.addEventListener("input", refresh);
  bar.appendChild(el("label", {}, ["search", search]));
  var count = el("span", { id: "row-count", class: "muted" });
  bar.appendChild(count);

  // --- table ---------------------------------------------------------------------------------
  var cols = [
    { key: "policy", label: "policy" },
    { key: "episode_id", label: "episode" },
    { key: "question", label: "question" },
    { key: "answer_format", label: "format" },
    { key: "evidence_sources", label: "evidence" },
    { key: "page_scope", label: "pages" },
    { key: "gold_answer", label: "gold" },
    { key: "answer", label: "predicted" },
    { key: "correct", label: "correct" },
    { key: "covered", label: "covered" }
  ].concat(D.numeric.map(function (k) { return { key: k, label: k.replace(/_/g, " "), num: true }; }))
   .concat([{ key: "stop_reason", label: "stop" }]);
  var table = el("table", { class: "runs", id: "runs" });
  var thead = el("thead"), tr = el("tr");
  cols.forEach(function (c) {
    var th = el("th", { "data-sort": c.key, text: c.label, title: "sort by " + c.label });
    th.addEventListener("click", function () {
      if (sortKey === c.key) sortDir = -sortDir; else { sortKey = c.key; sortDir = c.num ? -1 : 1; }
      refresh();
    });
    tr.appendChild(th);
  });
  tr.appendChild(el("th", { text: "compare" }));
  thead.appendChild(tr); table.appendChild(thead);
  var tbody = el("tbody"); table.appendChild(tbody);

  function cell(r, c) {
    var v = r[c.key];
    if (c.key === "episode_id") return el("td", {}, [el("a", { href: r.href, class: "episode-link", text: v })]);
    if (c.key === "question") {
      var q = el("td", { class: "q", title: v || "" });
      if (r.n_turns > 1) q.appendChild(el("span", { class: "badge kind-badge", text: r.n_turns + " turns" }));
      if (r.n_documents > 1) q.appendChild(el("span", { class: "badge kind-badge", text: r.n_documents + " documents" }));
      q.appendChild(document.createTextNode((v || "").length > 120 ? v.slice(0, 117) + "…" : (v || "")));
      return q;
    }
    if (c.key === "correct") return el("td", {}, [badge(v, "correct", "wrong")]);
    if (c.key === "covered") return el("td", {}, [badge(v, "covered", "missed")]);
    if (c.key === "evidence_sources") return el("td", { text: (v || []).join(", ") });
    if (c.num) return el("td", { class: "num", text: fmt(v, c.key === "steps" || c.key === "operations" || c.key === "tokens_rendered" ? 0 : 3) });
    return el("td", { text: v === null || v === undefined ? "–" : String(v) });
  }
  function cmp(a, b) {
    var x = a[sortKey], y = b[sortKey];
    if (Array.isArray(x)) x = x.join(","); if (Array.isArray(y)) y = y.join(",");
    if (x === null || x === undefined) return 1; if (y === null || y === undefined) return -1;
    if (typeof x === "boolean") { x = +x; y = +y; }
    return (x < y ? -1 : x > y ? 1 : 0) * sortDir;
  }
  function visibleRows() {
    var q = search.value.trim().toLowerCase();
    var out = rows.filter(function (r) {
      for (var i = 0; i < filters.length; i++) {
        var v = filters[i].select.value;
        if (v && !filters[i].test(r, v)) return false;
      }
      return !q || (r.question || "").toLowerCase().indexOf(q) >= 0 || r.episode_id.toLowerCase().indexOf(q) >= 0;
    });
    if (sortKey) out = out.slice().sort(cmp);
    return out;
  }

  // --- per-policy summary --------------------------------------------------------------------
  var summary = el("table", { class: "summary", id: "policy-summary" });
  var sumCols = ["reward", "support", "noise", "cost", "tokens_rendered", "evidence_page_recall"];
  function mean(list, k) {
    var v = list.map(function (r) { return r[k]; }).filter(function (x) { return typeof x === "number"; });
    return v.length ? v.reduce(function (a, b) { return a + b; }, 0) / v.length : null;
  }
  function rate(list, k) {
    var v = list.filter(function (r) { return r[k] !== null && r[k] !== undefined; });
    return v.length ? v.filter(function (r) { return r[k]; }).length + "/" + v.length : "–";
  }
  function renderSummary(list) {
    summary.innerHTML = "";
    var h = el("tr", {}, [el("th", { text: "policy" }), el("th", { text: "runs" }), el("th", { text: "correct" }),
      el("th", { text: "covered" })].concat(sumCols.map(function (k) { return el("th", { text: "mean " + k.replace(/_/g, " ") }); })));
    summary.appendChild(h);
    uniq(list.map(function (r) { return r.policy; })).forEach(function (p) {
      var sub = list.filter(function (r) { return r.policy === p; });
      summary.appendChild(el("tr", {}, [el("td", { text: p }), el("td", { class: "num", text: String(sub.length) }),
        el("td", { class: "num", text: rate(sub, "correct") }), el("td", { class: "num", text: rate(sub, "covered") })]
        .concat(sumCols.map(function (k) { return el("td", { class: "num", text: fmt(mean(sub, k), k === "tokens_rendered" ? 0 : 3) }); }))));
    });
  }

  function refresh() {
    var list = visibleRows();
    tbody.innerHTML = "";
    list.forEach(function (r) {
      var row = el("tr", { class: "run-row", "data-policy": r.policy, "data-episode": r.episode_id });
      cols.forEach(function (c) { row.appendChild(cell(r, c)); });
      var others = (D.episodes_with_runs[r.slug] || []).filter(function (p) { return p !== r.policy; });
      row.appendChild(el("td", {}, others.length ? [el("a", { class: "compare-link",
        href: "episodes/" + r.slug + ".html#compare=" + encodeURIComponent(r.policy) + "," + encodeURIComponent(others[0]),
        text: "vs " + others[0] })] : []));
      tbody.appendChild(row);
    });
    Array.prototype.forEach.call(thead.querySelectorAll("th"), function (th) {
      th.classList.toggle("sorted-asc", th.getAttribute("data-sort") === sortKey && sortDir > 0);
      th.classList.toggle("sorted-desc", th.getAttribute("data-sort") === sortKey && sortDir < 0);
    });
    count.textContent = list.length + " of " + rows.length + " runs shown";
    renderSummary(list);
  }

  var info = el("div", { class: "card" });
  var ri = D.run_info || {};
  info.appendChild(el("div", {}, [el("b", { text: rows.length + " runs" }), " · " + D.policies.length + " policies · " +
    uniq(rows.map(function (r) { return r.episode_id; })).length + " episodes" + (ri.run_dir ? " · run " + ri.run_dir : "")]));
  info.appendChild(el("div", { class: "muted", text: "correct: the reader's answer scored ≥ 0.5 (answering readers only; the oracle reader gives no answer). covered: every gold evidence item reached the reader." }));
  (D.warnings || []).slice(0, 20).forEach(function (w) { info.appendChild(el("div", { class: "warn", text: w })); });
  if ((D.warnings || []).length > 20) info.appendChild(el("div", { class: "warn", text: (D.warnings.length - 20) + " more warnings in report.json" }));
  app.appendChild(info);
  app.appendChild(bar);
  app.appendChild(el("div", { class: "card" }, [summary]));
  app.appendChild(el("div", { class: "tablewrap" }, [table]));
  refresh();
})();
