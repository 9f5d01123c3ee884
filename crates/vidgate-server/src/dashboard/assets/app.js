// The dashboard's only script, served from the binary. Pages work without
// it; it adds copy buttons, the secret reveal, and the playground's live
// quote and in-place run (with its elapsed time and a cancel). No inline code: the CSP allows 'self' scripts only.
"use strict";

(function () {
  const csrfToken = () => {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  };

  // Copy buttons: data-copy names the element whose text is copied.
  for (const button of document.querySelectorAll("[data-copy]")) {
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      const status = button.parentElement.querySelector(".copied");
      try {
        await navigator.clipboard.writeText(source.textContent.trim());
        if (status) status.textContent = "Copied.";
      } catch (error) {
        // Clipboard access can be refused; select the text for a manual copy.
        const range = document.createRange();
        range.selectNodeContents(source);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        if (status) status.textContent = "Press Ctrl+C to copy.";
      }
    });
  }

  // Reveal buttons: data-reveal names the hidden element they show. A
  // target with data-source is empty in the page and filled from that URL
  // (JSON with one string field) the first time it is shown. Without
  // JavaScript, or when that fetch fails, the button submits a plain GET
  // that renders it shown.
  for (const button of document.querySelectorAll("[data-reveal]")) {
    const target = document.getElementById(button.dataset.reveal);
    button.setAttribute("aria-expanded", String(!target.hidden));
    button.addEventListener("click", async (event) => {
      event.preventDefault();
      if (target.hidden && target.dataset.source && !target.textContent) {
        try {
          const response = await fetch(target.dataset.source, {
            headers: { "X-CSRF-Token": csrfToken() },
            credentials: "same-origin",
            cache: "no-store",
          });
          if (!response.ok) throw new Error(String(response.status));
          const body = await response.json();
          target.textContent = Object.values(body)[0];
        } catch (_) {
          button.form.submit();
          return;
        }
      }
      target.hidden = !target.hidden;
      // What goes with the revealed element (its copy button) shows with it.
      for (const companion of document.querySelectorAll(`[data-shown-with="${target.id}"]`)) {
        companion.hidden = target.hidden;
      }
      button.setAttribute("aria-expanded", String(!target.hidden));
      button.textContent = target.hidden ? "Reveal secret" : "Hide secret";
    });
  }

  // A table wider than its box scrolls inside it (never the page); say so
  // above it, or a phone shows half a table with nothing to tell that the
  // rest is there.
  for (const wrap of document.querySelectorAll(".table-wrap")) {
    const hint = document.createElement("p");
    hint.className = "scroll-hint";
    hint.textContent = "Scroll the table sideways to see all of it \u2192";
    wrap.before(hint);
    const mark = () => { hint.hidden = wrap.scrollWidth <= wrap.clientWidth + 1; };
    mark();
    window.addEventListener("resize", mark);
  }

  // Selects that stand for a whole GET form.
  for (const select of document.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", () => select.form.requestSubmit());
  }

  // A GET form with data-carry (the playground's model switch) takes the
  // inputs of the form it names along in its query, so the next page opens
  // with the values they share (the server keeps those its form accepts).
  for (const chooser of document.querySelectorAll("form[data-carry]")) {
    chooser.addEventListener("submit", (event) => {
      const carried = document.getElementById(chooser.dataset.carry);
      if (!carried) return;
      event.preventDefault();
      const query = new URLSearchParams(new FormData(chooser));
      for (const input of carried.querySelectorAll("[data-type]")) {
        query.set(input.name, input.type === "checkbox" ? String(input.checked) : input.value);
      }
      window.location.assign(chooser.action + "?" + query.toString());
    });
  }

  const form = document.getElementById("playground");
  if (!form) return;
  const endpoint = form.dataset.endpoint;
  const quote = document.getElementById("quote");
  const quoteError = document.getElementById("quote-error");
  const runButton = document.getElementById("run");
  const result = document.getElementById("run-result");
  const runStatus = document.getElementById("run-status");
  const runError = document.getElementById("run-error");
  const runLink = document.getElementById("run-link");
  const videoSlot = document.getElementById("run-video-slot");
  const runElapsed = document.getElementById("run-elapsed");
  const runQueue = document.getElementById("run-queue");
  const runAddCredit = document.getElementById("run-add-credit");
  const cancelButton = document.getElementById("run-cancel");
  const finalStatuses = ["succeeded", "failed", "canceled"];
  // The run being shown: its generation as last seen, and when it began.
  let current = null;
  let startedAt = 0;
  let elapsedTimer = null;
  let queueTimer = null;

  // The API body the form stands for; the server's body_from_form follows
  // the same rules for the no-JavaScript path.
  const readForm = () => {
    const body = {};
    for (const input of form.querySelectorAll("[data-type]")) {
      const type = input.dataset.type;
      if (type === "boolean") {
        body[input.name] = input.checked;
        continue;
      }
      const text = input.value.trim();
      if (text === "") continue;
      if (type === "integer") {
        const number = Number(text);
        body[input.name] = Number.isInteger(number) ? number : text;
      } else if (type === "uri-array") {
        body[input.name] = text.split("\n").map((line) => line.trim()).filter((line) => line);
      } else {
        body[input.name] = text;
      }
    }
    return body;
  };

  // Prices are whole cents, so two decimals are exact.
  const dollars = (amount) => "$" + (Math.round(amount * 100) / 100).toFixed(2);

  const errorMessage = async (response) => {
    try {
      const body = await response.json();
      return body.error && body.error.message ? body.error.message : "HTTP " + response.status;
    } catch (error) {
      return "HTTP " + response.status;
    }
  };

  let quoteTimer = null;
  let quoteSequence = 0;
  const updateQuote = async () => {
    const sequence = ++quoteSequence;
    try {
      const response = await fetch("/api/v1/quote/" + endpoint, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(readForm()),
        credentials: "same-origin",
      });
      if (sequence !== quoteSequence) return; // A newer quote is on its way.
      if (response.ok) {
        const body = await response.json();
        quote.textContent = dollars(body.cost.amount_usd);
        quoteError.textContent = "";
      } else {
        quote.textContent = "—";
        quoteError.textContent = await errorMessage(response);
      }
    } catch (error) {
      quoteError.textContent = "The price could not be fetched.";
    }
  };
  const scheduleQuote = () => {
    clearTimeout(quoteTimer);
    quoteTimer = setTimeout(updateQuote, 250);
  };
  form.addEventListener("input", scheduleQuote);
  form.addEventListener("change", scheduleQuote);
  updateQuote();

  const sleep = (milliseconds) => new Promise((resolve) => setTimeout(resolve, milliseconds));

  // Seconds since the run was sent, every second until it ends.
  const showElapsed = () => {
    const seconds = Math.floor((Date.now() - startedAt) / 1000);
    const final = current && finalStatuses.includes(current.status);
    runElapsed.textContent = (final ? "after " : "for ") + seconds + " s";
  };

  // Where the run waits: the queue is shared fairly between accounts, so
  // what this page can know is how many of the account's own earlier runs
  // are still queued ahead of it (the account's oldest queued job goes
  // first). Asked every few seconds while the run is queued.
  const showQueue = async () => {
    if (!current || current.status !== "queued") {
      runQueue.hidden = true;
      return;
    }
    try {
      const response = await fetch("/api/v1/generations?status=queued&limit=100", { credentials: "same-origin" });
      if (!response.ok || !current || current.status !== "queued") return;
      const queued = (await response.json()).data;
      const ahead = queued.filter((other) =>
        other.created_at < current.created_at || (other.created_at === current.created_at && other.id < current.id)).length;
      runQueue.textContent = ahead === 0
        ? "Queued: next of this account's runs to start."
        : "Queued behind " + ahead + " earlier run" + (ahead === 1 ? "" : "s") + " of this account.";
      runQueue.hidden = false;
    } catch (_) {
      runQueue.hidden = true;
    }
  };

  const showStatus = (generation) => {
    current = generation;
    runStatus.textContent = generation.status;
    const final = finalStatuses.includes(generation.status);
    cancelButton.hidden = final;
    showElapsed();
    if (final) {
      clearInterval(elapsedTimer);
      clearInterval(queueTimer);
      runQueue.hidden = true;
    } else if (generation.status !== "queued") {
      runQueue.hidden = true;
    }
    if (generation.status === "succeeded" && generation.output && generation.output.video_url) {
      const video = document.createElement("video");
      video.id = "run-video";
      video.controls = true;
      video.preload = "metadata";
      video.src = generation.output.video_url;
      videoSlot.replaceChildren(video);
    } else if (generation.status === "canceled") {
      runError.textContent = "Canceled: the hold on the balance was refunded.";
      runError.hidden = false;
    } else if (generation.status === "failed" && generation.error) {
      runError.textContent = generation.error.message || generation.error.code || "The generation failed.";
      runError.hidden = false;
    }
  };

  // Polls once a second until the generation ends; a 429 waits as told.
  const poll = async (generation) => {
    while (!finalStatuses.includes(generation.status)) {
      await sleep(1000);
      const response = await fetch("/api/v1/generations/" + generation.id, { credentials: "same-origin" });
      if (response.status === 429) {
        await sleep(1000 * Number(response.headers.get("Retry-After") || 1));
        continue;
      }
      if (!response.ok) {
        runError.textContent = await errorMessage(response);
        runError.hidden = false;
        return;
      }
      generation = await response.json();
      showStatus(generation);
    }
  };

  // Follows the generation's event stream, each change shown as it is
  // committed, until it ends. The browser reconnects a dropped stream by
  // itself (resuming with Last-Event-ID); a stream refused outright (a
  // server without streams, or past its cap of open streams) is closed
  // for good, and then the page polls instead.
  const follow = (generation) =>
    new Promise((resolve) => {
      if (finalStatuses.includes(generation.status)) {
        resolve();
        return;
      }
      let latest = generation;
      const source = new EventSource("/api/v1/generations/" + encodeURIComponent(generation.id) + "/events");
      source.onmessage = (message) => {
        latest = JSON.parse(message.data);
        showStatus(latest);
        if (finalStatuses.includes(latest.status)) {
          source.close();
          resolve();
        }
      };
      source.onerror = () => {
        if (source.readyState === EventSource.CLOSED) {
          poll(latest).then(resolve, resolve);
        }
      };
    });

  // Cancels the run shown, through the API's cancel with the session.
  cancelButton.addEventListener("click", async () => {
    if (!current) return;
    cancelButton.disabled = true;
    try {
      const response = await fetch("/api/v1/generations/" + encodeURIComponent(current.id) + "/cancel", {
        method: "POST",
        headers: { "X-CSRF-Token": csrfToken() },
        credentials: "same-origin",
      });
      if (response.ok) {
        showStatus(await response.json());
      } else {
        runError.textContent = await errorMessage(response);
        runError.hidden = false;
      }
    } catch (error) {
      runError.textContent = "The cancel could not be sent: " + error.message;
      runError.hidden = false;
    } finally {
      cancelButton.disabled = false;
    }
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    runButton.disabled = true;
    result.hidden = false;
    runError.hidden = true;
    runAddCredit.hidden = true;
    runQueue.hidden = true;
    runLink.hidden = true;
    cancelButton.hidden = true;
    videoSlot.replaceChildren();
    runStatus.textContent = "submitting";
    current = null;
    startedAt = Date.now();
    clearInterval(elapsedTimer);
    clearInterval(queueTimer);
    showElapsed();
    elapsedTimer = setInterval(showElapsed, 1000);
    // The outcome shows beside the form on a wide screen and below it on a
    // narrow one: bring it into view either way.
    result.scrollIntoView({ block: "nearest" });
    try {
      const response = await fetch("/api/v1/run/" + endpoint, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          "X-CSRF-Token": csrfToken(),
          // A double click or a retried request cannot bill twice.
          "Idempotency-Key": crypto.randomUUID(),
        },
        body: JSON.stringify(readForm()),
        credentials: "same-origin",
      });
      if (response.status !== 202) {
        // Nothing was created: no generation to link to.
        clearInterval(elapsedTimer);
        runStatus.textContent = "refused";
        runElapsed.textContent = "";
        runError.textContent = await errorMessage(response);
        runError.hidden = false;
        runAddCredit.hidden = response.status !== 402;
        return;
      }
      const generation = await response.json();
      runLink.href = "/dashboard/generations/" + generation.id;
      runLink.hidden = false;
      showStatus(generation);
      showQueue();
      queueTimer = setInterval(showQueue, 3000);
      await follow(generation);
    } catch (error) {
      clearInterval(elapsedTimer);
      clearInterval(queueTimer);
      runError.textContent = "The request failed: " + error.message;
      runError.hidden = false;
    } finally {
      runButton.disabled = false;
    }
  });
})();
