// The screenshots of docs/ui.md (docs/figures/ui/), taken in headless Chromium from a running `churnbench ui`.
// Not part of CI. Needs Debian's `chromium` and playwright-core (`npm install playwright-core` in any folder,
// then `NODE_PATH=<that folder>/node_modules`):
//
//   node scripts/ui_screenshots.js PORT SWEEP_ID EVAL_RUN_PARTITION docs/figures/ui
//
// Look at every PNG before committing it: a spinner or an error page is not a screenshot of the UI.
const { chromium } = require('playwright-core');

const ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync'];

async function launchpad(page, base, out) {
  // The sweep job's Launchpad: an unknown arm refused by the Arm enum, the SaaS profiles offered (Ctrl+Space).
  await page.goto(`${base}/locations/churnbench/jobs/sweep/playground`, { waitUntil: 'networkidle', timeout: 120000 });
  await page.waitForSelector('.CodeMirror', { timeout: 120000 });
  const yaml = 'ops:\n  run_sweep_cells:\n    config:\n      preset: smoke\n      gaps: [7, 28]\n'
    + '      arms: [grounding, oracle]\n      agent: deterministic\n      saas_profile: \n';
  await page.evaluate((text) => {
    const cm = document.querySelector('.CodeMirror').CodeMirror;
    cm.setValue(text); cm.focus(); cm.setCursor({ line: 7, ch: 20 });
  }, yaml);
  await page.waitForTimeout(3000);
  await page.keyboard.press('Control+Space');
  await page.waitForTimeout(3000);
  await page.screenshot({ path: `${out}/launchpad.png` });
}

async function runs(page, base, sweepId, out) {
  const filter = `q%5B0%5D=tag%3Achurnbench%2Fsweep%3D${encodeURIComponent(sweepId)}`;
  await page.goto(`${base}/runs?${filter}`, { waitUntil: 'networkidle', timeout: 120000 });
  await page.waitForTimeout(5000);
  await page.screenshot({ path: `${out}/runs.png` });
  await page.goto(`${base}/runs?view=runs&${filter}`, { waitUntil: 'networkidle', timeout: 120000 });
  await page.waitForTimeout(5000);
  await page.screenshot({ path: `${out}/runs_started.png` });
}

async function evalRun(browser, base, key, out) {
  // A wide page, the navigation hidden, scrolled to what the evaluation read.
  const page = await browser.newPage({ viewport: { width: 2300, height: 1500 } });
  await page.goto(`${base}/assets/eval_run?view=partitions&partition=${encodeURIComponent(key)}`,
    { waitUntil: 'networkidle', timeout: 120000 });
  await page.getByText('Hide navigation').click().catch(() => {});
  const label = page.getByText('inputs_read', { exact: true }).first();
  await label.waitFor({ timeout: 120000 });
  await label.scrollIntoViewIfNeeded();
  await page.waitForTimeout(1500);
  const box = await label.boundingBox();
  await page.mouse.move(box.x + 200, box.y + 50);
  await page.mouse.wheel(0, box.y - 260);
  await page.waitForTimeout(1500);
  await page.screenshot({ path: `${out}/eval_run_inputs.png` });
}

(async () => {
  const [port, sweepId, key, out] = process.argv.slice(2);
  const base = `http://127.0.0.1:${port}`;
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ARGS });
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  await launchpad(page, base, out);
  await runs(page, base, sweepId, out);
  await evalRun(browser, base, key, out);
  await browser.close();
})().catch((e) => { console.error(e); process.exit(1); });
