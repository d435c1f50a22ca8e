// The tab's icon: Courier's, with the unread count in a badge while there is one, drawn on a canvas from the icon
// itself and set as a data: URL (the page's policy takes pictures from data:); the plain icon again at 0.

let plain = null; // the icon's own address and type, as index.html names them
let plainType = null;
let image = null;
let wanted = 0;

function iconImage() {
  image ??= new Promise((resolve, reject) => {
    const icon = new Image();
    icon.onload = () => resolve(icon);
    icon.onerror = reject;
    icon.src = plain;
  });
  return image;
}

export async function showUnread(count) {
  const link = document.querySelector('link[rel~="icon"]');
  if (!link || count === wanted) return;
  wanted = count;
  plain ??= link.getAttribute("href");
  plainType ??= link.getAttribute("type") ?? "";
  if (count <= 0) {
    link.setAttribute("href", plain);
    link.setAttribute("type", plainType);
    delete link.dataset.unread;
    return;
  }
  let url;
  try {
    url = badged(await iconImage(), count > 99 ? "99+" : String(count));
  } catch {
    return; // no icon to draw on: the title still counts
  }
  if (wanted !== count) return; // another count came meanwhile
  link.setAttribute("href", url);
  link.setAttribute("type", "image/png");
  link.dataset.unread = String(count);
}

function badged(icon, text) {
  const size = 64;
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = size;
  const g = canvas.getContext("2d");
  g.drawImage(icon, 0, 0, size, size);
  g.font = `700 ${text.length > 2 ? 24 : 34}px system-ui, sans-serif`;
  const height = 40;
  const width = Math.min(size, Math.max(height, g.measureText(text).width + 14));
  g.fillStyle = "#c62828";
  g.beginPath();
  g.roundRect(size - width, 0, width, height, height / 2);
  g.fill();
  g.fillStyle = "#ffffff";
  g.textAlign = "center";
  g.textBaseline = "middle";
  g.fillText(text, size - width / 2, height / 2 + 2);
  return canvas.toDataURL("image/png");
}
