// Drives the live view (/ui) in headless Chromium for tests/it/e2e_ui.rs.
//
//   node ui.mjs BASE_URL SESSION_ID EXPECTED_JSON
//
// EXPECTED_JSON maps subagent ids to the status each must show. The script
// opens the page, picks the session from the sessions table, waits for
// every expected row, prints `READY`, then obeys one JSON command per stdin
// line, answering each with one line on stdout:
//
//   {"wait": {"id": ID, "status": S}}  -> `SEEN` once the row shows S (the
//                                         page was not reloaded meanwhile)
//   {"terminate": ID}                   -> `STOPPED` once the page's terminate
//                                         (confirmed) was answered
//   {"screenshot": {"select": ID, "path": P}} -> `SHOT` once written
//   {"marked": {"id": ID, "waiting": W}} -> `MARKED` once the tree marks the
//                                         row as waiting for W (a person)
//   {"answer": {"id": APPROVAL_ID, "decision": D, "note": N, "tool": T}}
//                                       -> `ANSWERED` once the "Waiting for
//                                         you" panel shows the approval (its
//                                         tool T), its D button was clicked and
//                                         confirmed, and the host said 200
//   {"quit": true}                      -> exits
//
// With ADMIN_TOKEN in the environment, the page must first ask for the
// admin token, which the script gives it.
//
// Anything that goes wrong prints `ERROR <why>` and exits 1.
import { chromium } from "playwright-core";
import readline from "node:readline";

const [base, session, expectedJson] = process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const TIMEOUT = 15000;

function say(line) {
  process.stdout.write(`${line}\n`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  // As root in a sandbox with a closed network: no sandbox, no background calls home.
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});

async function main() {
  // Narrower than the three-pane layout: every column of the tree must show.
  const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
  const dialogs = [];
  page.on("dialog", async (dialog) => {
    dialogs.push(dialog.message());
    await dialog.accept();
  });
  const problems = [];
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error" || /Content Security Policy/.test(message.text())) {
      problems.push(`console: ${message.text()}`);
    }
  });
  page.setDefaultTimeout(TIMEOUT);
  await page.goto(`${base}/ui`);
  // With ADMIN_TOKEN set the host has [admin] tokens: the page asks for one,
  // once, in its dialog.
  if (process.env.ADMIN_TOKEN) {
    await page.locator("#token-dialog[open]").waitFor();
    await page.locator("#token-input").fill(process.env.ADMIN_TOKEN);
    await page.locator("#token-form button[type=submit]").click();
  }
  // The page opens on a session without being asked; choosing ours shows its tree.
  await page.locator("#sessions tr.selected").waitFor();
  const sessionRow = page.locator(`#sessions tr[data-session="${session}"]`);
  await sessionRow.waitFor();
  await sessionRow.click();
  await page.evaluate(() => {
    window.__loadedOnce = true;
  });
  for (const [id, status] of Object.entries(expected)) {
    await page.locator(`.row[data-id="${id}"][data-status="${status}"]`).waitFor();
  }
  // The tree is drawn as a tree: each level further in than its parent.
  const indents = await page.$$eval(".row .name", (names) => names.map((name) => parseFloat(getComputedStyle(name).paddingLeft)));
  if (!indents.some((indent) => indent > 0)) throw new Error(`no row is indented: ${indents}`);
  await page.locator("#conn.conn-live").waitFor();
  // No column of the tree is cut off at this width.
  const clipped = await page.evaluate(() => {
    const pane = document.getElementById("tree-pane").getBoundingClientRect();
    const columns = [...document.querySelectorAll(".tree-columns span")];
    return columns.filter((column) => column.getBoundingClientRect().right > pane.right + 0.5).map((c) => c.textContent);
  });
  if (clipped.length) throw new Error(`tree columns cut off at 1280 px: ${clipped}`);
  // Nor of the sessions table: each header shows whole, and the table (its
  // last column too) ends inside its pane and the window.
  const cut = await page.evaluate(() => {
    const paneElement = document.getElementById("sessions-pane");
    const style = getComputedStyle(paneElement);
    const inner = paneElement.getBoundingClientRect().right - parseFloat(style.paddingRight) - parseFloat(style.borderRightWidth);
    const edge = Math.min(inner, window.innerWidth) + 0.5;
    const heads = [...document.querySelectorAll("#sessions th")];
    const found = heads
      .filter((th) => th.scrollWidth > th.clientWidth || th.getBoundingClientRect().right > edge)
      .map((th) => `${th.textContent} (${th.scrollWidth} px in ${th.clientWidth}, right edge ${th.getBoundingClientRect().right})`);
    const table = document.getElementById("sessions").getBoundingClientRect();
    if (table.right > edge) found.push(`the table ends at ${table.right} px, past ${edge - 0.5}`);
    return found;
  });
  if (cut.length) throw new Error(`sessions columns cut off at 1280 px: ${cut.join("; ")}`);
  say("READY");

  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const command = JSON.parse(line);
    if (command.wait) {
      const { id, status } = command.wait;
      await page.locator(`.row[data-id="${id}"][data-status="${status}"]`).waitFor();
      const same = await page.evaluate(() => window.__loadedOnce === true);
      if (!same) throw new Error("the page was reloaded");
      say("SEEN");
    } else if (command.terminate) {
      const id = command.terminate;
      await page.locator(`.row[data-id="${id}"]`).click();
      await page.locator(`#detail-title:has-text("${id}")`).waitFor();
      const button = page.locator("#terminate-button");
      await button.waitFor({ state: "visible" });
      if (await button.isDisabled()) throw new Error("terminate is disabled");
      const answered = page.waitForResponse((r) => r.url().endsWith(`/subagents/${id}/terminate`));
      await button.click();
      const response = await answered;
      if (response.status() !== 200) throw new Error(`terminate answered ${response.status()}`);
      if (!dialogs.some((text) => text.includes(id))) throw new Error(`no confirmation was asked: ${dialogs}`);
      await page.locator(`.row[data-id="${id}"][data-status="TERMINATED"]`).waitFor();
      say("STOPPED");
    } else if (command.marked) {
      const { id, waiting } = command.marked;
      await page.locator(`.row[data-id="${id}"] .waiting-mark[data-waiting="${waiting}"]`).waitFor();
      say("MARKED");
    } else if (command.answer) {
      const { id, decision, note, tool } = command.answer;
      const ask = page.locator(`#people-pane .ask[data-id="${id}"]`);
      await ask.waitFor();
      const head = await ask.locator(".ask-head").textContent();
      if (!head.includes(tool)) throw new Error(`the panel does not name ${tool}: ${head}`);
      const args = await ask.locator(".args").textContent();
      if (!args.includes("env")) throw new Error(`the panel does not show the arguments: ${args}`);
      if (note) await ask.locator("input.note").fill(note);
      const asked = dialogs.length;
      const answered = page.waitForResponse((r) => r.url().endsWith(`/admin/approvals/${id}`));
      await ask.locator(`button[data-decision="${decision}"]`).click();
      const response = await answered;
      if (response.status() !== 200) throw new Error(`the answer got ${response.status()}`);
      if (dialogs.length === asked) throw new Error("no confirmation was asked");
      await ask.waitFor({ state: "detached" });
      say("ANSWERED");
    } else if (command.screenshot) {
      const { select, path } = command.screenshot;
      await page.locator(`.row[data-id="${select}"]`).click();
      await page.locator("#detail-error").waitFor();
      await page.screenshot({ path, fullPage: false });
      say("SHOT");
    } else if (command.quit) {
      break;
    }
  }
  if (problems.length) throw new Error(problems.join("; "));
}

try {
  await main();
  await browser.close();
} catch (error) {
  say(`ERROR ${String(error.message || error).split("\n")[0]}`);
  await browser.close();
  process.exit(1);
}
