// Kairos console: small enhancements; every page works without this script.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Ask before what cannot be undone (forms marked data-confirm).
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
  // Show each time's local reading on hover (the page shows UTC).
  document.querySelectorAll("time[datetime]").forEach((el) => {
    const ms = Number(el.getAttribute("datetime"));
    if (!Number.isNaN(ms)) el.title = `${el.title} (${new Date(ms).toLocaleString()} local)`;
  });
  // The overview can reload itself every 10 s; the choice is kept in this browser.
  const live = document.getElementById("live-refresh");
  if (live) {
    live.checked = localStorage.getItem("kairos-live") === "1";
    const tick = () => { if (live.checked) window.location.reload(); };
    let timer = window.setInterval(tick, 10000);
    live.addEventListener("change", () => {
      localStorage.setItem("kairos-live", live.checked ? "1" : "0");
      window.clearInterval(timer);
      timer = window.setInterval(tick, 10000);
    });
  }
});
