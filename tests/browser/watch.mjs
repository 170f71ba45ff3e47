// Keeps the live view open on one session, for the cost bench
// (`cargo bench --bench wire -- live_view`):
//
//   node watch.mjs BASE_URL SESSION_ID
//
// Opens the page on the session and prints `OPEN` once its tree is drawn
// and its stream is live. Then, one command per stdin line: `close` (the
// tab goes to about:blank; prints `CLOSED`) or `open` (back to the page;
// prints `OPEN`). While the page is open it prints, every 5 s, `FRAME <ms>`:
// the longest gap between animation frames in that time (how responsive it
// stays). Exits when stdin closes.
import { chromium } from "playwright-core";
import readline from "node:readline";

const [base, session] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});
const page = await browser.newPage({ viewport: { width: 1500, height: 720 } });
let open = false;

async function openPage() {
  await page.goto(`${base}/ui#session=${session}`);
  await page.locator(".row").first().waitFor({ timeout: 30000 });
  await page.locator("#conn.conn-live").waitFor({ timeout: 30000 });
  await page.evaluate(() => {
    window.__longestFrame = 0;
    let last = performance.now();
    const tick = (now) => {
      window.__longestFrame = Math.max(window.__longestFrame, now - last);
      last = now;
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  open = true;
  process.stdout.write("OPEN\n");
}

setInterval(async () => {
  if (!open) return;
  const longest = await page.evaluate(() => {
    const value = window.__longestFrame;
    window.__longestFrame = 0;
    return value;
  }).catch(() => null);
  if (open && longest != null) process.stdout.write(`FRAME ${Math.round(longest)}\n`);
}, 5000);

await openPage();
for await (const line of readline.createInterface({ input: process.stdin })) {
  if (line.trim() === "close") {
    open = false;
    await page.goto("about:blank");
    process.stdout.write("CLOSED\n");
  } else if (line.trim() === "open") {
    await openPage();
  }
}
await browser.close();
process.exit(0);
