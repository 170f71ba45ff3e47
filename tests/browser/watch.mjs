// Keeps the live view open on one session, for the cost bench
// (`cargo bench --bench wire -- live_view`):
//
//   node watch.mjs BASE_URL SESSION_ID
//
// Prints `READY` once the session's tree is drawn and the stream is live,
// then every 5 s `FRAME <ms>`: the longest gap between animation frames in
// that time (the page's responsiveness). Closes when stdin closes.
import { chromium } from "playwright-core";

const [base, session] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});
const page = await browser.newPage({ viewport: { width: 1500, height: 720 } });
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
process.stdout.write("READY\n");
const timer = setInterval(async () => {
  const longest = await page.evaluate(() => {
    const value = window.__longestFrame;
    window.__longestFrame = 0;
    return value;
  });
  process.stdout.write(`FRAME ${Math.round(longest)}\n`);
}, 5000);
process.stdin.resume();
process.stdin.on("end", async () => {
  clearInterval(timer);
  await browser.close();
  process.exit(0);
});
