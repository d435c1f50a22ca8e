// Text as the page shows it. Everything another user wrote is put in the page as text nodes (textContent), never as
// HTML: a message of `<img src=x onerror=…>` shows those characters.

// An element, its attributes and children (strings become text nodes).
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    if (name === "class") element.className = value;
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "text") element.textContent = value;
    else element.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return element;
}

const minute = 60 * 1000;
const day = 24 * 60 * minute;

function startOfDay(ms) {
  const date = new Date(ms);
  date.setHours(0, 0, 0, 0);
  return date.getTime();
}

// "just now", "5 min", "3 h", "yesterday", a weekday, then a date.
export function relativeTime(ms, now = Date.now()) {
  if (!ms) return "";
  const age = now - ms;
  if (age < minute) return "just now";
  if (age < 60 * minute) return `${Math.floor(age / minute)} min`;
  const today = startOfDay(now);
  if (ms >= today) return age < 12 * 60 * minute ? `${Math.floor(age / (60 * minute))} h` : clock(ms);
  if (ms >= today - day) return "yesterday";
  if (ms >= today - 6 * day) return new Date(ms).toLocaleDateString(undefined, { weekday: "short" });
  return new Date(ms).toLocaleDateString();
}

export function clock(ms) {
  return new Date(ms).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}

export function fullTime(ms) {
  return new Date(ms).toLocaleString();
}

// A byte count for people, in decimal units as the command line says them (ChatText.size): 512 B, 2.4 MB, 30 MB.
export function byteSize(bytes) {
  let value = Number(bytes);
  if (value < 1000) return `${value} B`;
  const units = ["kB", "MB", "GB", "TB"];
  value /= 1000;
  let unit = 0;
  while (value >= 999.5 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${value < 10 ? value.toFixed(1) : value.toFixed(0)} ${units[unit]}`;
}

// A mention is `@name` or `＠name` (the server's rule, Mentions in CourierVocabulary): after the start or a character
// that cannot be part of a name (a space, punctuation, any non-ASCII character: `你好@bob` mentions bob), the run of
// ASCII letters, digits, `.`, `_` and `-` from a letter or digit; it names the run without the marks it ends with when
// that is a member (`@bob.` is bob), else the whole run. A link is http or https. One pass over the text, whatever its
// length.
const tokens =
  /(?<![A-Za-z0-9_.\-@＠])[@＠]([A-Za-z0-9][A-Za-z0-9_.\-]*)|(?<!\w)https?:\/\/[^\s<>"]*[^\s<>".,;:!?)\]}'’”」』。，！？]/gu;

// The name a mention's run gives, among `names` (lowercased), or null: the run without its trailing marks first.
function mentioned(run, names) {
  if (run.length > 32) return null;
  const whole = run.toLowerCase();
  const trimmed = whole.replace(/[._-]+$/, "");
  if (trimmed === "all") return "all";
  if (names.has(trimmed)) return trimmed;
  if (names.has(whole)) return whole;
  return null;
}

// The text as nodes: links as anchors, mentions of `names` (lowercased) and of @all marked.
export function richText(text, names = new Set()) {
  const nodes = [];
  let at = 0;
  for (const match of text.matchAll(tokens)) {
    const run = match[1];
    let shown = match[0];
    if (run !== undefined) {
      const name = mentioned(run, names);
      if (name === null) continue;
      // The mark covers `@name`; a trailing mark that is not the name's stays text.
      shown = match[0].slice(0, 1 + name.length);
    }
    if (match.index > at) nodes.push(document.createTextNode(text.slice(at, match.index)));
    nodes.push(
      run !== undefined
        ? h("span", { class: "mention", text: shown })
        : h("a", { href: shown, target: "_blank", rel: "noopener noreferrer nofollow", text: shown }),
    );
    at = match.index + shown.length;
  }
  if (at < text.length) nodes.push(document.createTextNode(text.slice(at)));
  return nodes;
}

// Whether `text` mentions `user` (or everyone).
export function mentions(text, user) {
  const wanted = new Set([user.toLowerCase()]);
  for (const match of (text ?? "").matchAll(tokens)) {
    if (match[1] !== undefined && mentioned(match[1], wanted) !== null) return true;
  }
  return false;
}

// A search hit's fragment with its marks (in Unicode scalars from its start) as <mark> elements.
export function markedFragment(fragment, marks = []) {
  const characters = Array.from(fragment);
  const nodes = [];
  let at = 0;
  for (const mark of [...marks].sort((a, b) => (a.start ?? 0) - (b.start ?? 0))) {
    const start = Math.max(at, mark.start ?? 0);
    const end = Math.min(characters.length, start + (mark.length ?? 0));
    if (start > at) nodes.push(document.createTextNode(characters.slice(at, start).join("")));
    if (end > start) nodes.push(h("mark", { text: characters.slice(start, end).join("") }));
    at = Math.max(at, end);
  }
  if (at < characters.length) nodes.push(document.createTextNode(characters.slice(at).join("")));
  return nodes;
}

// The first letter (a whole grapheme, so an emoji or a Chinese character stays whole) for an avatar's place.
export function initial(name) {
  const text = (name || "?").trim();
  if (typeof Intl.Segmenter === "function") {
    for (const { segment } of new Intl.Segmenter().segment(text)) return segment.toUpperCase();
  }
  return Array.from(text)[0]?.toUpperCase() ?? "?";
}

// A stable hue for a name's avatar.
export function hue(name) {
  let hash = 0;
  for (const c of name) hash = (hash * 31 + c.codePointAt(0)) >>> 0;
  return hash % 360;
}
