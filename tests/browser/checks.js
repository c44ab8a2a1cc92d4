// What a user would see wrong on the page, as a list of strings (empty: nothing found).
// overflow: an element wider than the box that holds it (or a scroll box that must scroll);
// chart text under 11 px; text whose WCAG contrast with its background is under 4.5:1.
() => {
  const problems = [];
  const visible = (el) => { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none"; };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
    (typeof el.className === "string" && el.className ? "." + el.className.trim().split(/\s+/).join(".") : "");
  const root = document.querySelector("#content") || document.body;
  if (document.documentElement.scrollWidth > window.innerWidth + 1)
    problems.push(`overflow: the page scrolls sideways (${document.documentElement.scrollWidth} > ${window.innerWidth})`);
  for (const el of root.querySelectorAll("*")) {
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
