// Light or dark: the system's choice (prefers-color-scheme) unless the user picked one with the
// toggle; only that choice is remembered (never anything secret).

const KEY = "pandastack.theme";

function current() {
  const saved = localStorage.getItem(KEY);
  if (saved === "light" || saved === "dark") return saved;
  return matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

function apply(theme) {
  document.documentElement.dataset.theme = theme;
  const b = document.getElementById("theme");
  if (b) {
    const other = theme === "dark" ? "light" : "dark";
    b.textContent = other === "dark" ? "Dark" : "Light";
    b.setAttribute("aria-label", `Switch to the ${other} theme`);
  }
}

export function initTheme() {
  apply(current());
  document.getElementById("theme")?.addEventListener("click", () => {
    const next = current() === "dark" ? "light" : "dark";
    localStorage.setItem(KEY, next);
    apply(next);
  });
}
