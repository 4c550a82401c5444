// pymq dashboard: the little script the pages use (body view tabs). Everything works without it.
document.addEventListener("DOMContentLoaded", () => {
  for (const tabs of document.querySelectorAll("[data-tabs]")) {
    const buttons = tabs.querySelectorAll("button[data-tab]");
    const panes = document.querySelectorAll("[data-pane]");
    const show = (name) => {
      for (const p of panes) p.hidden = p.dataset.pane !== name;
      for (const b of buttons) b.classList.toggle("on", b.dataset.tab === name);
    };
    for (const b of buttons) b.addEventListener("click", () => show(b.dataset.tab));
    if (buttons.length) show(buttons[0].dataset.tab);
  }
});
