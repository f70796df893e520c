#!/usr/bin/python3
"""The attention explorer (GET / of `seqgrad serve`) in headless Chromium, driven by Selenium: the
page served by a tiny model is given a German sentence and must show
  * the translation `seqgrad translate` prints for the same checkpoint;
  * a heatmap of one cell per (output token, source token), each row's weights summing to 1, its
    rows the output tokens then <eos>;
  * on hovering a row, the source token with the row's largest weight marked as the argmax;
  * on clicking a cell, that step's energies and weights;
  * step-through decoding that reaches the <eos> step, with the step's top-k tokens (greedy: the
    produced token first), and the attention diagnostics.
A screenshot is saved as BUILD_DIR/serve-explorer.png (CI keeps it). Exits 77 (SKIP) with the
reason when Chromium, chromedriver or Selenium is missing, or the build has no HTTP server.

Usage: test_tools_serve_browser.py PATH/TO/seqgrad DATA_DIR SCREENSHOT_PATH
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import Server, train_tiny, translate_cli  # noqa: E402

SENTENCE = "Ein Mann fährt Fahrrad auf der Straße."


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        skip("Selenium is missing (apt-get install python3-selenium)")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
    if not binary or not driver:
        skip("Chromium or chromedriver is missing (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: test_tools_serve_browser.py PATH/TO/seqgrad DATA_DIR SCREENSHOT_PATH")
    seqgrad, data, screenshot = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
    p = subprocess.run([seqgrad, "serve", "--checkpoint", "x", "--port", "0"], capture_output=True, text=True)
    if "built without an HTTP server" in p.stderr:
        skip("this build has no HTTP server (cpp-httplib, libcpp-httplib-dev, missing)")
    tmp = tempfile.mkdtemp(prefix="seqgrad_explorer_")
    try:
        drv = browser()
        ckpt = train_tiny(seqgrad, data, tmp)
        expected = translate_cli(seqgrad, ckpt, [SENTENCE])[0]
        server = Server(seqgrad, "--checkpoint", ckpt, "--threads", "1")
        try:
            run_page(drv, server.url, expected, screenshot)
        finally:
            drv.quit()
            status, _, err = server.stop()
            check(status == 0, f"the server exited with {status}: {err}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("explorer: translation, heatmap, hover, cell details and step-through as expected; screenshot", screenshot)


def run_page(drv, url, expected, screenshot):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    drv.get(url + "/")
    wait = WebDriverWait(drv, 30)
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
    drv.find_element(By.ID, "src").send_keys(SENTENCE)
    drv.find_element(By.ID, "go").click()
    wait.until(lambda d: d.find_element(By.ID, "panels").get_attribute("data-state") == "done")
    status = drv.find_element(By.ID, "status").text
    check(status == "", f"the page shows an error: {status}")
    panel = drv.find_element(By.CSS_SELECTOR, ".panel[data-model='0']")
    got = panel.find_element(By.CSS_SELECTOR, ".translation").text
    check(got == expected, f"the page's translation {got!r} differs from seqgrad translate's {expected!r}")

    # the heatmap: one cell per (output token, source token), rows summing to 1
    sources = panel.find_elements(By.CSS_SELECTOR, "th.src")
    rows = panel.find_elements(By.CSS_SELECTOR, "th.tgt")
    cells = panel.find_elements(By.CSS_SELECTOR, "td.cell")
    check(len(sources) >= 8 and len(rows) >= 2, f"{len(sources)} source and {len(rows)} output tokens")
    check(len(cells) == len(rows) * len(sources), f"{len(cells)} cells for {len(rows)} x {len(sources)} tokens")
    weights = [[float(c.get_attribute("data-weight"))
                for c in panel.find_elements(By.CSS_SELECTOR, f"td.cell[data-row='{i}']")] for i in range(len(rows))]
    for i, row in enumerate(weights):
        check(abs(sum(row) - 1) < 1e-4, f"row {i} ({rows[i].text}) sums to {sum(row)}")
    check(rows[-1].text == "<eos>", f"the last row is {rows[-1].text!r}, not <eos>")

    # hovering a row marks its argmax source token
    for i in [0, len(rows) // 2]:
        ActionChains(drv).move_to_element(rows[i]).perform()
        marked = panel.find_elements(By.CSS_SELECTOR, "th.src.argmax")
        best = weights[i].index(max(weights[i]))
        check(len(marked) == 1 and marked[0].get_attribute("data-col") == str(best),
              f"hovering row {i}: marked {[m.get_attribute('data-col') for m in marked]}, argmax {best}")

    # a cell's details: that step's energies and weights
    panel.find_element(By.CSS_SELECTOR, "td.cell[data-row='1'][data-col='0']").click()
    shown = [float(w.text) for w in panel.find_elements(By.CSS_SELECTOR, ".details td.weight")]
    check(len(shown) == len(sources) and all(abs(a - b) < 1e-4 for a, b in zip(shown, weights[1])),
          f"the details of step 2 show weights {shown}, the heatmap {weights[1]}")
    check(len(panel.find_elements(By.CSS_SELECTOR, ".details td.energy")) == len(sources), "no energies shown")

    # step-through decoding reaches <eos>
    stepper = panel.find_element(By.CSS_SELECTOR, ".stepper")
    check(stepper.get_attribute("data-step") == "0", "the stepper does not start at step 1")
    nxt = panel.find_element(By.CSS_SELECTOR, ".step-next")
    for _ in range(len(rows) - 1):
        nxt.click()
    check(stepper.get_attribute("data-token") == "<eos>", f"the last step is {stepper.get_attribute('data-token')!r}")
    topk = [r.text for r in panel.find_elements(By.CSS_SELECTOR, ".step-topk tr")]
    check(len(topk) == 5 and topk[0].startswith("<eos>"), f"the last step's top-k: {topk}")
    check("diagonal distance" in panel.find_element(By.CSS_SELECTOR, ".diagnostics").text, "no diagnostics shown")
    check(not nxt.is_enabled(), "next is still enabled at the last step")
    panel.find_element(By.CSS_SELECTOR, ".step-prev").click()
    check(stepper.get_attribute("data-step") == str(len(rows) - 2), "prev does not go back one step")
    ActionChains(drv).move_to_element(rows[0]).perform()
    os.makedirs(os.path.dirname(os.path.abspath(screenshot)), exist_ok=True)
    drv.save_screenshot(screenshot)


if __name__ == "__main__":
    main()
