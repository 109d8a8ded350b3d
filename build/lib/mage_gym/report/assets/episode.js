/* One episode: every policy's run, or two side by side (#compare=a,b). Plain script (file://).
 *
 * The state shown for a timeline entry is recomputed here from the trace: the reset state (entry pages)
 * plus the node-state changes of every step up to the selected one (mage_gym/report/data.py writes them).
 * In a conversation each later question starts from its recorded state (the carried working subgraph and
 * its entry pages: run.turn_starts), which replaces the state before the turn's first step. Pages of a
 * union of documents are labelled with their own document and page number (doc.pages[i].label).
 */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var meta = D.meta, doc = D.doc, runs = D.runs, policies = meta.policies;
  var app = document.getElementById("app");
  var gold = {}; (meta.gold_nodes || []).forEach(function (n) { gold[n] = 1; });
  var goldPages = {}; (meta.gold_pages || []).forEach(function (p) { goldPages[p] = 1; });
  var elements = {};
  Object.keys(doc.elements).forEach(function (p) {
    doc.elements[p].forEach(function (e) { e.page = +p; elements[e.id] = e; });
  });
  var pageIndex = {}; doc.pages.forEach(function (pg, i) { pageIndex[pg.id] = i; });
  var docs = doc.documents || [], turnsMeta = meta.turns || [];
  function pageLabel(p) { var pg = doc.pages[p]; return pg && pg.label ? pg.label : "p" + p; }

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (attrs[k] === null || attrs[k] === undefined) continue;
      if (k === "text") e.textContent = attrs[k];
      else if (k === "class") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) { if (c != null) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return e;
  }
  function fmt(v, d) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(d === undefined ? 3 : d);
    if (typeof v === "boolean") return v ? "yes" : "no";
    return String(v);
  }
  function badge(v, yes, no) {
    if (v === null || v === undefined) return el("span", { class: "badge na", text: yes + ": n/a" });
    return el("span", { class: "badge " + (v ? "ok" : "bad"), text: v ? yes : no });
  }
  function shortId(id) {  // the document prefix stays when several documents share the page numbers
    if (!id) return "";
    if ((D.doc.documents || []).length > 1) return id;
    var m = /:(p\d+(?::e\d+)?)$/.exec(id);
    return m ? m[1] : id;
  }
  function pageOf(id) {
    if (id in pageIndex) return pageIndex[id];
    if (elements[id]) return elements[id].page;
    var m = /:p(\d+)(?::|$)/.exec(id || "");
    return m ? +m[1] : null;
  }
  function kv(pairs) {
    var t = el("table", { class: "kv" });
    pairs.forEach(function (p) { t.appendChild(el("tr", {}, [el("td", { text: p[0] }), el("td", {}, [p[1] instanceof Node ? p[1] : fmt(p[1])])])); });
    return t;
  }

  // --- episode header --------------------------------------------------------------------------
  function facts(pairs, cls) {
    var d = el("div", { class: "facts" + (cls ? " " + cls : "") });
    pairs.forEach(function (p) {
      if (p === null) return;
      d.appendChild(el("span", { class: "fact" }, [el("span", { class: "k", text: p[0] }), p[1] instanceof Node ? p[1] : fmt(p[1])]));
    });
    return d;
  }
  var head = el("div", { class: "card" });
  head.appendChild(el("div", { class: "question", text: meta.question }));
  head.appendChild(facts([
    ["gold answer", el("b", { text: fmt(meta.gold_answer) })], ["format", meta.answer_format],
    ["evidence", (meta.evidence_sources || []).join(", ") || "–"],
    ["evidence pages", (meta.evidence_pages || []).length ? meta.evidence_pages.map(pageLabel).join(", ") + " (" + meta.page_scope + ")" : "none"],
    ["gold nodes", (meta.gold_nodes || []).map(shortId).join(", ") || "–"],
    ["document", docs.length > 1 ? docs.length + " documents · " + doc.n_pages + " pages" + (doc.has_pixels ? "" : " · no page images (synthetic)")
      : doc.doc_id + " · " + doc.n_pages + " pages" + (doc.has_pixels ? "" : " · no page images (synthetic)")],
    ["benchmark", meta.benchmark],
    meta.kind && meta.kind !== "single" ? ["episode", meta.kind.replace(/_/g, " ") + (turnsMeta.length ? " · " + turnsMeta.length + " turns" : "")] : null
  ]));
  if (docs.length > 1) {  // which pages belong to which document (node ids and labels use each document's own numbers)
    var dt = el("table", { class: "summary documents" }, [el("tr", {}, [el("th", { text: "document" }), el("th", { text: "pages here" }),
      el("th", { text: "own pages" }), el("th", { text: "gold pages (own numbers)" })])]);
    (meta.documents && meta.documents.length ? meta.documents : docs).forEach(function (d) {
      dt.appendChild(el("tr", { "data-doc": d.doc_id }, [el("td", { text: d.doc_id }),
        el("td", { text: d.page_offset + "–" + (d.page_offset + d.n_pages - 1) }), el("td", { text: "p0–p" + (d.n_pages - 1) }),
        el("td", { text: (d.gold_pages || []).map(function (p) { return "p" + p; }).join(", ") || "–" })]));
    });
    head.appendChild(dt);
  }
  if (turnsMeta.length) {  // the conversation's questions with their gold
    var ol = el("ol", { class: "turn-questions", start: "0" });
    turnsMeta.forEach(function (t) {
      ol.appendChild(el("li", { "data-turn": String(t.turn) }, [el("span", { text: t.question + " " }),
        el("span", { class: "muted", text: "gold: " }), el("b", { text: fmt(t.gold_answer) }),
        (t.evidence_labels || []).length ? el("span", { class: "muted", text: " · evidence " + t.evidence_labels.join(", ") }) : null]));
    });
    head.appendChild(ol);
  }
  app.appendChild(head);

  var tabs = el("div", { class: "tabs", id: "tabs" });
  app.appendChild(tabs);
  var panes = el("div", { class: "panes", id: "panes" });
  app.appendChild(panes);

  function route() {
    var h = decodeURIComponent(location.hash.replace(/^#/, ""));
    var m = /^compare=([^,]+),(.+)$/.exec(h);
    if (m && runs[m[1]] && runs[m[2]]) return { compare: [m[1], m[2]] };
    m = /^run=(.+)$/.exec(h);
    return { run: m && runs[m[1]] ? m[1] : policies[0] };
  }

  function renderTabs(r) {
    tabs.innerHTML = "";
    policies.forEach(function (p) {
      var b = el("button", { class: "tab" + (r.run === p ? " active" : ""), "data-policy": p, text: p });
      b.addEventListener("click", function () { location.hash = "run=" + encodeURIComponent(p); });
      tabs.appendChild(b);
    });
    if (policies.length > 1) {
      var a = el("select", { id: "cmp-a" }), b2 = el("select", { id: "cmp-b" });
      policies.forEach(function (p) { a.appendChild(el("option", { value: p, text: p })); b2.appendChild(el("option", { value: p, text: p })); });
      a.value = r.compare ? r.compare[0] : policies[0];
      b2.value = r.compare ? r.compare[1] : policies[1];
      var go = el("button", { id: "cmp-go", class: r.compare ? "active" : "", text: "side by side" });
      go.addEventListener("click", function () { location.hash = "compare=" + encodeURIComponent(a.value) + "," + encodeURIComponent(b2.value); });
      tabs.appendChild(el("span", { class: "muted", text: " compare " }));
      tabs.appendChild(a); tabs.appendChild(b2); tabs.appendChild(go);
    }
  }

  function render() {
    var r = route();
    renderTabs(r);
    panes.innerHTML = "";
    panes.classList.toggle("compare", !!r.compare);
    (r.compare || [r.run]).forEach(function (p) { panes.appendChild(buildPane(p, !!r.compare)); });
  }

  // --- reader input, per-document recall, turns ------------------------------------------------------
  function readerBlock(ri, ro, title, open) {
    var rd = el("details", { class: "reader", open: open ? "open" : null }, [el("summary", { text: title })]);
    if (ri) {
      rd.appendChild(el("div", { class: "muted", text: "mode " + ri.mode + " · " + fmt(ri.text_tokens) + " text tokens + " + fmt(ri.image_tokens) + " image tokens · " + (ri.images || []).length + " images" }));
      var imgs = el("div", { class: "reader-images" });
      (ri.images || []).forEach(function (im) {
        imgs.appendChild(el("figure", {}, [im.src ? el("img", { src: im.src, loading: "lazy", decoding: "async", alt: im.node_id })
          : el("div", { class: "blank", style: "width:120px;aspect-ratio:" + im.width + "/" + im.height + ";position:relative" }),
          el("figcaption", { text: im.kind + " " + im.node_id + " · sent at " + im.width + "×" + im.height + " px" })]));
      });
      rd.appendChild(imgs);
      rd.appendChild(el("pre", { class: "xml", text: ri.xml }));
    } else rd.appendChild(el("div", { class: "muted", text: "no reader input recorded" }));
    if (ro) rd.appendChild(kv([["reader answer", ro.answer], ["raw output", ro.raw || "–"], ["cached", ro.cached], ["error", ro.error]]));
    return rd;
  }
  function docRecall(rec, label) {
    return facts([[label, el("span", {}, Object.keys(rec).map(function (d) {
      return el("span", { class: "doc-recall", "data-doc": d, text: d + " " + fmt(rec[d]) + "  " });
    }))]], "per-document");
  }
  function turnTable(run, compact) {
    var box = el("div", { class: "turns" });
    var t = el("table", { class: "summary turns-table" }, [el("tr", {}, ["turn", "question", "answer", "gold", "correct", "covered",
      "page recall", "tokens", "reward", "support", "stop"].map(function (h) { return el("th", { text: h }); }))]);
    run.turns.forEach(function (tr) {
      var g = turnsMeta[tr.turn] || {};
      t.appendChild(el("tr", { "data-turn": String(tr.turn) }, [el("td", { class: "num", text: String(tr.turn) }), el("td", { text: tr.question }),
        el("td", {}, [tr.answer === null || tr.answer === undefined ? el("span", { class: "muted", text: "–" }) : el("b", { text: tr.answer })]),
        el("td", { text: fmt(g.gold_answer) }), el("td", {}, [badge(tr.correct, "correct", "wrong")]), el("td", {}, [badge(tr.covered, "covered", "missed")]),
        el("td", { class: "num", text: fmt(tr.evidence_page_recall) }), el("td", { class: "num", text: fmt(tr.tokens_rendered, 0) }),
        el("td", { class: "num", text: fmt(tr.reward) }), el("td", { class: "num", text: fmt(tr.support) }), el("td", { text: fmt(tr.stop_reason) })]));
    });
    box.appendChild(t);
    run.turns.forEach(function (tr) {
      var g = turnsMeta[tr.turn] || {};
      var d = el("details", { class: "turn card", "data-turn": String(tr.turn) }, [el("summary", { text: "Turn " + tr.turn + ": " + tr.question })]);
      d.appendChild(facts([["answer", el("b", { text: fmt(tr.answer) })], ["gold", g.gold_answer],
        ["evidence", (g.evidence_labels || []).join(", ") || "–"], ["steps", (tr.end_step - tr.first_step)],
        ["working set at start", (tr.working_set || []).length + " nodes"]], "answer"));
      d.appendChild(facts([["reward", el("b", { text: fmt(tr.reward) })], ["support", tr.support], ["noise", (tr.components || {}).noise],
        ["cost", (tr.components || {}).cost], ["page recall", tr.evidence_page_recall], ["tokens", fmt(tr.tokens_rendered, 0)]], "components"));
      if (tr.per_document_recall) d.appendChild(docRecall(tr.per_document_recall, "page recall by document"));
      if ((tr.derived || []).length) d.appendChild(el("div", { class: "muted", text: "recovered from the episode's totals and means (the last turn has no record of its own): " + tr.derived.join(", ") }));
      if ((tr.replay_mismatch || []).length) d.appendChild(el("div", { class: "warn", text: "Replayed states at this turn's end differ on " + tr.replay_mismatch.length + " nodes" }));
      d.appendChild(readerBlock(tr.reader_input, tr.reader_output, "Reader input (exact) and output", false));
      box.appendChild(d);
    });
    return box;
  }

  // --- one run -----------------------------------------------------------------------------------
  function buildPane(pol, compact) {
    var run = runs[pol];
    var steps = run.steps;
    var n = steps.length;
    var pane = el("section", { class: "pane card", "data-policy": pol });
    pane.appendChild(el("h2", {}, [pol + "  ", badge(run.correct, "correct", "wrong"), " ", badge(run.covered, "covered", "missed"),
      " ", el("span", { class: "badge", text: "stop: " + fmt(run.stop_reason) })]));
    var c = run.components || {}, m = run.metrics || {};
    var noAnswer = run.answer === null || run.answer === undefined;
    pane.appendChild(facts([
      ["predicted", noAnswer ? el("span", { class: "muted", text: "(oracle reader: no answer text)" }) : el("b", { text: run.answer })],
      ["gold", meta.gold_answer]
    ], "answer"));
    pane.appendChild(facts([
      ["reward", el("b", { text: fmt(c.reward) })],
      ["= support", c.support], ["− λ" + fmt(c.lambda_noise, 2) + " × noise", c.noise], ["− λ" + fmt(c.lambda_cost, 2) + " × cost", c.cost],
      ["cost = tokens", fmt(c.cost_tokens) + " · ops " + fmt(c.cost_operations) + " · calls " + fmt(c.cost_calls)],
      ["gold coverage", c.gold_coverage]
    ], "components"));
    pane.appendChild(facts([
      ["steps", m.steps], ["operations", m.operations], ["activations", m.activations], ["opens", m.opens], ["searches", m.searches],
      ["invalid", m.invalid_actions], ["rounds", m.rounds], ["evaluator calls", m.evaluator_calls],
      ["page recall", m.evidence_page_recall], ["element recall", m.element_recall], ["element precision", m.element_precision],
      ["rendered", fmt(m.pages_rendered) + " pages, " + fmt(m.elements_rendered) + " elements, " + fmt(m.images_rendered) + " images, " + fmt(m.tokens_rendered) + " tokens"],
      ["budget", run.budget ? Object.keys(run.budget).map(function (k) { return k + "=" + run.budget[k]; }).join(" ") : "–"],
      ["retriever", run.retriever], ["render", run.render_mode]
    ], "metrics"));
    if (m.per_document_recall) pane.appendChild(docRecall(m.per_document_recall, (run.turns || []).length ? "page recall by document (mean over turns)" : "page recall by document"));
    if ((run.turns || []).length) pane.appendChild(turnTable(run, compact));
    if (!run.complete) pane.appendChild(el("div", { class: "warn", text: "This trace has no end record (the run stopped early); states are replayed from its steps." }));
    if ((run.replay_mismatch || []).length) pane.appendChild(el("div", { class: "warn replay-mismatch",
      text: "Replayed final states differ from the recorded ones on " + run.replay_mismatch.length + " nodes: " + run.replay_mismatch.slice(0, 6).join(", ") }));
    pane.appendChild(el("div", { class: "legend" }, [el("span", { class: "l-activated", text: "activated" }), el("span", { class: "l-opened", text: "opened" }),
      el("span", { class: "l-pruned", text: "pruned" }), el("span", { class: "l-unvisited", text: "unvisited" }),
      el("span", { class: "l-gold", text: "gold evidence" }), el("span", { class: "l-changed", text: "changed by the selected step" }),
      el("span", { class: "hint muted", text: "pages 0-based as in node ids · click a step for the state after it · click a page to zoom · ← → step" })]));

    // timeline
    var work = el("div", { class: "work" });
    var tl = el("ol", { class: "timeline" });
    var marks = [];
    (run.rounds || []).forEach(function (r) { marks.push({ at: r.after_step, kind: "round", r: r }); });
    (run.round_ends || []).forEach(function (r) { marks.push({ at: r.after_step, kind: "round_end", r: r }); });
    function addMarks(i) {
      marks.filter(function (mk) { return mk.at === i; }).forEach(function (mk) {
        if (mk.kind === "round") {
          var d = el("details", {}, [el("summary", { text: "round " + mk.r.round + " · evaluator decision" }),
            el("div", { class: "muted", text: "parsed: " + JSON.stringify(mk.r.decision) }),
            el("pre", { class: "raw", text: mk.r.raw === null || mk.r.raw === undefined ? "(no raw output recorded)" : mk.r.raw })]);
          tl.appendChild(el("li", { class: "round" }, [d]));
        } else {
          tl.appendChild(el("li", { class: "round muted", text: "round " + mk.r.round + " closed (" + mk.r.reason + ")" }));
        }
      });
    }
    var entry = (run.entry_pages || []).map(shortId).join(", ");
    var turns = run.turns || [], starts = run.turn_starts || [];
    tl.appendChild(el("li", { class: "mark", "data-step": "-1", text: "reset · entry pages " + (entry || "none") + (turns.length ? " · turn 0: " + turns[0].question : "") }));
    function addTurnMarks(i) {  // a turn that ended before step i, then the next question
      turns.forEach(function (t, j) {
        if (j < turns.length - 1 && t.end_step === i) tl.appendChild(el("li", { class: "turn-end", "data-turn": String(t.turn) },
          [el("b", { text: "turn " + t.turn + " answered" }), " · " + fmt(t.stop_reason) + " · answer ", el("b", { text: fmt(t.answer) }),
           " · reward " + fmt(t.reward) + " · page recall " + fmt(t.evidence_page_recall) + " · " + fmt(t.tokens_rendered) + " tokens"]));
      });
      starts.forEach(function (ts) {
        if (ts.after_step === i) tl.appendChild(el("li", { class: "turn-start", "data-turn": String(ts.turn) },
          [el("b", { text: "turn " + ts.turn + ": " }), ts.question,
           el("div", { class: "budget", text: (ts.carried ? "carried" : "fresh") + " working set: " + Object.keys(ts.states).length + " nodes" })]));
      });
    }
    steps.forEach(function (s, i) {
      addTurnMarks(i);
      addMarks(i);
      var target = s.op === "SearchEvidence" && s.query ? "“" + s.query + "”" : shortId(s.node_id);
      var et = s.node_id && elements[s.node_id] ? " (" + elements[s.node_id].type + ")" : "";
      var bl = s.budget_left || {};
      var li = el("li", { class: "step" + (s.ok ? "" : " refused") + (s.phase !== "policy" ? " phase-" + s.phase : ""), "data-step": String(i) }, [
        el("span", { class: "muted", text: (turns.length ? "T" + s.turn + " " : "") + "t" + s.t + " r" + s.round + " " }), el("span", { class: "op", text: s.op }), " " + target + et + " ",
        s.ok ? el("span", { class: "badge ok", text: s.changes.length ? "✓ " + s.changes.length + " changed" : "✓" })
             : el("span", { class: "badge bad", title: s.error || "", text: "✗ " + (s.error || "refused") }),
        s.phase !== "policy" ? el("span", { class: "badge", text: s.phase }) : null,
        el("div", { class: "budget", text: "left: acts " + fmt(bl.activations) + " (round " + fmt(bl.round_activations) + ") · opens " + fmt(bl.opens) +
          " · rounds " + fmt(bl.rounds) + " · steps " + fmt(bl.steps) + (s.reason ? " · reason: " + s.reason : "") })
      ]);
      tl.appendChild(li);
    });
    addTurnMarks(n);
    addMarks(n);
    tl.appendChild(el("li", { class: "mark", "data-step": String(n), text: "end · " + fmt(run.stop_reason) + " · final states" }));
    work.appendChild(tl);

    // pages the episode touched, with element boxes
    var pagesDiv = el("div", { class: "pages" });
    var boxes = {}, figures = {};
    meta.touched_pages.forEach(function (p) {
      var pg = doc.pages[p];
      var fig = el("figure", { class: "page" + (goldPages[p] ? " gold" : ""), "data-page": String(p), "data-id": pg.id });
      var sheet = el("div", { class: "sheet", style: "padding-top:" + (100 * pg.h / pg.w).toFixed(2) + "%" });
      if (pg.src) sheet.appendChild(el("img", { src: pg.src, loading: "lazy", decoding: "async", alt: "page " + p }));
      else sheet.appendChild(el("div", { class: "blank", title: "no page image (synthetic document)" }));
      (doc.elements[String(p)] || []).forEach(function (e) {
        var b = e.bbox;
        var box = el("div", { class: "box" + (gold[e.id] ? " gold" : ""), "data-id": e.id, "data-state": "unvisited",
          style: "left:" + (100 * b[0]).toFixed(2) + "%;top:" + (100 * b[1]).toFixed(2) + "%;width:" + (100 * (b[2] - b[0])).toFixed(2) +
            "%;height:" + (100 * (b[3] - b[1])).toFixed(2) + "%" });
        box.title = shortId(e.id) + " · " + e.type + (gold[e.id] ? " · GOLD" : "") + "\n" + e.summary;
        sheet.appendChild(box);
        boxes[e.id] = box;
      });
      sheet.addEventListener("click", function () { fig.classList.toggle("zoom"); });
      var cap = el("figcaption", {}, [el("span", { text: pageLabel(p) + (goldPages[p] ? " · gold" : "") }), el("span", { class: "pstate muted" })]);
      fig.appendChild(sheet); fig.appendChild(cap);
      pagesDiv.appendChild(fig);
      figures[p] = fig;
    });
    if (!meta.touched_pages.length) pagesDiv.appendChild(el("div", { class: "muted", text: "no page was touched" }));
    work.appendChild(pagesDiv);
    pane.appendChild(work);

    // every page, built only when opened; images load lazily
    var strip = null;
    var all = el("details", { class: "all-pages" }, [el("summary", { text: "All " + doc.n_pages + " pages (state frames; thumbnails load as you scroll)" })]);
    all.addEventListener("toggle", function () {
      if (!all.open || strip) return;
      strip = el("div", { class: "strip" });
      doc.pages.forEach(function (pg, p) {
        var th = el("a", { class: "thumb" + (goldPages[p] ? " gold" : ""), "data-page": String(p), href: figures[p] ? "#" : null, title: "page " + pageLabel(p) });
        if (pg.thumb) th.appendChild(el("img", { src: pg.thumb, loading: "lazy", decoding: "async", alt: "p" + p, width: "70",
          style: "aspect-ratio:" + pg.w + "/" + pg.h }));
        else th.appendChild(el("div", { class: "blank", style: "aspect-ratio:" + pg.w + "/" + pg.h }));
        th.appendChild(el("span", { text: pageLabel(p) }));
        if (figures[p]) th.addEventListener("click", function (ev) { ev.preventDefault(); figures[p].scrollIntoView({ block: "center" }); });
        strip.appendChild(th);
      });
      all.appendChild(strip);
      show(current);
    });
    pane.appendChild(all);

    // reader input
    pane.appendChild(readerBlock(run.reader_input, run.reader_output, turns.length ? "Reader input (exact) and output of the last turn" : "Reader input (exact) and output", !compact));

    // LLM evaluator rounds
    if ((run.rounds || []).length) {
      var rr = el("details", { class: "rounds", open: compact ? null : "open" }, [el("summary", { text: "Evaluator decisions per round (" + run.rounds.length + ")" })]);
      run.rounds.forEach(function (r) {
        rr.appendChild(el("div", { class: "card" }, [el("b", { text: "round " + r.round }),
          el("div", { class: "muted", text: "candidates: " + (r.candidates || []).map(function (c, i) { return (i + 1) + "=" + shortId(c); }).join(", ") }),
          el("div", { text: "parsed decision: " + JSON.stringify(r.decision) }),
          el("pre", { class: "raw", text: r.raw === null || r.raw === undefined ? "(no raw output recorded)" : r.raw })]));
      });
      pane.appendChild(rr);
    }

    // state at a timeline entry
    var current = n;
    function statesAt(k) {  // mage_gym.report.data.states_at
      var st = {};
      function restart(ts) { st = {}; for (var id in ts.states) st[id] = ts.states[id]; }
      for (var id in run.initial) st[id] = run.initial[id];
      for (var i = 0; i <= Math.min(k, n - 1); i++) {
        starts.forEach(function (ts) { if (ts.after_step === i) restart(ts); });
        steps[i].changes.forEach(function (ch) { st[ch[0]] = ch[1]; });
      }
      if (k >= n) starts.forEach(function (ts) { if (ts.after_step >= n) restart(ts); });
      return st;
    }
    function show(k) {
      current = k;
      var st = statesAt(k);
      var changed = {}, target = null;
      if (k >= 0 && k < n) { steps[k].changes.forEach(function (ch) { changed[ch[0]] = 1; }); target = steps[k].node_id; }
      for (var id in boxes) {
        var b = boxes[id];
        b.setAttribute("data-state", st[id] || "unvisited");
        b.classList.toggle("changed", !!changed[id]);
        b.classList.toggle("target", id === target);
      }
      for (var p in figures) {
        var f = figures[p], ps = st[doc.pages[p].id] || "unvisited";
        f.setAttribute("data-state", ps);
        f.classList.toggle("changed", !!changed[doc.pages[p].id]);
        f.querySelector(".pstate").textContent = ps;
      }
      if (strip) Array.prototype.forEach.call(strip.children, function (th) {
        th.setAttribute("data-state", st[doc.pages[+th.getAttribute("data-page")].id] || "unvisited");
      });
      Array.prototype.forEach.call(tl.querySelectorAll("li[data-step]"), function (li) {
        li.classList.toggle("current", +li.getAttribute("data-step") === k);
      });
      pane.setAttribute("data-current-step", String(k));
    }
    tl.addEventListener("click", function (ev) {
      var li = ev.target.closest("li[data-step]");
      if (li && !ev.target.closest("details")) show(+li.getAttribute("data-step"));
    });
    pane.show = show;
    pane.step = function (d) { show(Math.max(-1, Math.min(n, current + d))); };
    show(n);
    return pane;
  }

  document.addEventListener("keydown", function (ev) {
    if (ev.target.closest && ev.target.closest("input,select,textarea")) return;
    if (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") return;
    Array.prototype.forEach.call(panes.children, function (p) { p.step(ev.key === "ArrowLeft" ? -1 : 1); });
    ev.preventDefault();
  });
  window.addEventListener("hashchange", render);
  render();
})();
