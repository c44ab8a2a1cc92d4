// What a user would see wrong on the page, as a list of strings (empty: nothing found).
// overflow: an element wider than the box that holds it (or a scroll box that must scroll);
// chart text under 11 px; text whose WCAG contrast with its background is under 4.5:1;
// a table word (queue name, cron field, worker id) broken across lines other than after a
// separator (. _ - : / ,); a column header hidden
// by a scroll box or clipped; an element of opts.noCut cut short by an ellipsis (or a link or
// bar label whose text lost the end of its title, what tells two types apart); a cell of
// opts.maxLines ({selector: n}) on more lines than n. opts.spill=false skips the per-element
// overflow checks (then only the page's own sideways scroll counts).
(opts) => {
  opts = opts || {};
  const problems = [];
  const visible = (el) => { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none"; };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
    (typeof el.className === "string" && el.className ? "." + el.className.trim().split(/\s+/).join(".") : "");
  const root = document.querySelector("#content") || document.body;
  const page = document.scrollingElement || document.documentElement;
  if (page.scrollWidth > window.innerWidth + 1) {
    const wide = [...document.body.querySelectorAll("*")].filter((e) => visible(e) && e.getBoundingClientRect().right > window.innerWidth + 1);
    const deepest = wide.filter((e) => !wide.some((o) => o !== e && e.contains(o))).slice(0, 3).map(name);
    problems.push(`overflow: the page scrolls sideways (${page.scrollWidth} > ${window.innerWidth}; ${deepest.join(", ")})`);
  }
  for (const p of layoutProblems()) problems.push(p);
  for (const el of opts.spill === false ? [] : root.querySelectorAll("*")) {
    if (!visible(el) || el.closest("svg") && el.tagName.toLowerCase() !== "svg") continue;
    const s = getComputedStyle(el);
    if (s.position === "absolute" || s.position === "fixed") continue;
    if (["auto", "scroll"].includes(s.overflowX) && el.scrollWidth > el.clientWidth + 1)
      problems.push(`overflow: ${name(el)} must scroll sideways (${el.scrollWidth} > ${el.clientWidth})`);
    if (s.overflowX === "visible" && s.display !== "inline" && el.scrollWidth > el.clientWidth + 1
        && el.clientWidth > 0)
      problems.push(`overflow: the content of ${name(el)} spills out (${el.scrollWidth} > ${el.clientWidth})`);
    const parent = el.parentElement;
    if (!parent || !root.contains(parent)) continue;
    const ps = getComputedStyle(parent);
    if (ps.overflowX !== "visible" || ps.display === "inline") continue;
    const r = el.getBoundingClientRect(), pr = parent.getBoundingClientRect();
    if (r.right > pr.right + 1.5 || r.left < pr.left - 1.5)
      problems.push(`overflow: ${name(el)} (${Math.round(r.left)}..${Math.round(r.right)}) outside ${name(parent)} (${Math.round(pr.left)}..${Math.round(pr.right)})`);
  }
  for (const el of document.querySelectorAll(".pgjobs-chart, .pgjobs-chart *")) {
    if (!visible(el)) continue;
    const direct = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!direct) continue;
    let px = parseFloat(getComputedStyle(el).fontSize);
    if (el instanceof SVGElement && el.getScreenCTM) px *= el.getScreenCTM().a;
    if (px < 11) problems.push(`chart text under 11 px: "${el.textContent.trim().slice(0, 30)}" ${px.toFixed(1)} px`);
  }
  // a line break inside the word that does not follow a separator (". _ - : / ,")
  function midWord(node, start, word) {
    const top = (i) => { const r = document.createRange(); r.setStart(node, start + i); r.setEnd(node, start + i + 1);
      const b = [...r.getClientRects()].filter((x) => x.width > 0); return b.length ? Math.round(b[0].top) : null; };
    let prev = top(0);
    for (let i = 1; i < word.length; i++) {
      const t = top(i);
      if (t !== null && prev !== null && t > prev && !"._-:/,".includes(word[i - 1])) return true;
      if (t !== null) prev = t;
    }
    return false;
  }
  function layoutProblems() {
    const out = [];
    const lines = (el) => { // lines of text inside el (not its box: a table cell is as tall as its row)
      const r = document.createRange(); r.selectNodeContents(el);
      const tops = [...r.getClientRects()].filter((b) => b.width > 0 && b.height > 0).map((b) => b.bottom).sort((a, b) => a - b);
      return tops.filter((t, i) => i === 0 || t - tops[i - 1] > 4).length; };
    // a word of a table cell on two lines: its Range has two boxes on different lines
    for (const cell of root.querySelectorAll("td, th")) {
      if (!visible(cell) || cell.closest("[data-may-break]")) continue;
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        if (n.parentElement.closest("pre, [data-may-break]")) continue;
        const re = /\S+/g;
        for (let m = re.exec(n.textContent); m; m = re.exec(n.textContent)) {
          if (m[0].length < 4) continue;
          const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
          const tops = new Set([...r.getClientRects()].filter((b) => b.width > 0).map((b) => Math.round(b.top)));
          if (tops.size > 1 && midWord(n, m.index, m[0])) { out.push(`word broken across lines: "${m[0].slice(0, 40)}" in ${name(cell)}`); break; }
        }
      }
    }
    // column headers: inside every scroll or clip box that holds them
    for (const th of root.querySelectorAll("thead th")) {
      if (!visible(th)) continue;
      const r = th.getBoundingClientRect();
      for (let box = th.parentElement; box && box !== document.body; box = box.parentElement) {
        if (getComputedStyle(box).overflowX === "visible") continue;
        const b = box.getBoundingClientRect();
        if (r.right > b.right + 1.5 || r.left < b.left - 1.5)
          out.push(`column "${th.textContent.trim().slice(0, 30)}" hidden by ${name(box)} (${Math.round(r.left)}..${Math.round(r.right)} outside ${Math.round(b.left)}..${Math.round(b.right)})`);
      }
      if (r.right > window.innerWidth + 1)
        out.push(`column "${th.textContent.trim().slice(0, 30)}" off screen (${Math.round(r.right)} > ${window.innerWidth})`);
    }
    for (const sel of opts.noCut || []) for (const raw of document.querySelectorAll(sel)) {
      // an inline element has no box of its own to clip: measure the block that holds it
      const el = getComputedStyle(raw).display === "inline" ? raw.parentElement : raw;
      if (raw.matches("a[title], .pgjobs-bar-label[title]") && !raw.textContent.trim().endsWith(raw.title.slice(-8)))
        out.push(`the end is cut: "${raw.textContent.trim()}" for "${raw.title}"`);
      if (visible(el) && el.scrollWidth > el.clientWidth + 1)
        out.push(`cut short: "${el.textContent.trim().slice(0, 50)}" (${sel}, ${el.scrollWidth} > ${el.clientWidth})`);
    }
    for (const [sel, max] of Object.entries(opts.maxLines || {})) for (const el of document.querySelectorAll(sel)) {
      if (!visible(el)) continue;
      const n = lines(el);
      if (n > max) out.push(`${n} lines (at most ${max}): "${el.textContent.trim().slice(0, 50)}" (${sel})`);
    }
    return out;
  }
  const rgba = (c) => { const m = c.match(/[\d.]+/g) || [0, 0, 0, 0]; return m.map(Number).concat(m.length < 4 ? [1] : []).slice(0, 4); };
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let out = [255, 255, 255];
    for (const c of layers.reverse()) out = out.map((v, i) => c[i] * c[3] + v * (1 - c[3]));
    return out;
  };
  const seen = new Set();
  for (const el of document.querySelectorAll("#content *, .breadcrumbs, .breadcrumbs *, svg text")) {
    if (!visible(el) || seen.size > 4000) continue;
    const direct = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!direct || el.tagName === "OPTION") continue;
    const inSvg = el instanceof SVGElement;
    if (inSvg && el.tagName.toLowerCase() !== "text") continue;
    const s = getComputedStyle(el);
    const fg = rgba(inSvg ? s.fill : s.color), bg = background(el);
    const fgMixed = fg.slice(0, 3).map((v, i) => v * fg[3] + bg[i] * (1 - fg[3]));
    const [a, b] = [lum(fgMixed), lum(bg)].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    const large = parseFloat(s.fontSize) >= 24 || (parseFloat(s.fontSize) >= 18.66 && Number(s.fontWeight) >= 700);
    const key = name(el) + s.color;
    if (ratio < (large ? 3 : 4.5) && !seen.has(key)) {
      seen.add(key);
      problems.push(`contrast ${ratio.toFixed(2)}:1 for "${el.textContent.trim().slice(0, 30)}" (${name(el)}, ${inSvg ? s.fill : s.color} on rgb(${bg.map(Math.round)}))`);
    }
  }
  return problems;
}
