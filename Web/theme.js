// Light or dark. By default the system's choice (prefers-color-scheme), which app.css follows by itself; or the one
// the user made in the settings, kept in the browser and put on the root element as `data-theme`.

const themeKey = "courier.theme";
export const themes = { system: "As the system", light: "Light", dark: "Dark" };

export function theme() {
  const chosen = localStorage.getItem(themeKey);
  return Object.hasOwn(themes, chosen ?? "") ? chosen : "system";
}

export function setTheme(chosen) {
  if (chosen === "system") localStorage.removeItem(themeKey);
  else localStorage.setItem(themeKey, chosen);
  applyTheme();
}

function applyTheme() {
  const chosen = theme();
  if (chosen === "system") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = chosen;
}

// At the start, and whenever another tab changes it.
export function setUpTheme() {
  applyTheme();
  window.addEventListener("storage", (event) => {
    if (event.key === themeKey || event.key === null) applyTheme();
  });
}
