#!/usr/bin/python3
"""The attention explorer (GET / of `seqgrad serve`) in headless Chromium, driven by Selenium: the
page served by a tiny model is given a German sentence and must show
  * the translation `seqgrad translate` prints for the same checkpoint;
  * a heatmap of one cell per (output token, source token), each row's weights summing to 1, its
    rows the output tokens then <eos>;
  * on hovering a row, the source token with the row's largest weight marked as the argmax;
  * on clicking a cell, that step's energies and weights, and the additive attention's terms
    v_a tanh(q_a + k_a), whose sum is the decoder's energy;
  * step-through decoding that reaches the <eos> step, with the step's top-k tokens (greedy: the
    produced token first), and the attention diagnostics;
  * with beam 3, the translation `seqgrad translate --beam 3` prints and the beam tree, its best
    path one node per output token (<eos> included).
A tiny Transformer (2 layers of 4 heads) is served beside the GRU, and its panel must show
  * the translation `seqgrad translate` prints, and maps equal to the server's JSON (the explain
    answer, whose heads equal `translate --json --per-head`'s): every layer's and head's
    cross-attention, the heads' average (the last layer's: the answer's attention weights), the
    encoder's self-attention and the decoder's causal one (nothing after each row's position);
    every row summing to 1;
  * on clicking each cell of each head's map, the terms q_a·k_a/√d whose sum is the energy the
    answer holds for the cell, and the softmax of the row that gives its weight;
  * the per-head diagnostics of the answer, a row of which selects its head; the stepper to <eos>
    with the top-5, and with beam 3 the beam tree.
Side by side (the page's checkbox, POST /v1/side_by_side), the sentence through both:
  * the GRU's map and diagnostics, and the Transformer replayed along the GRU's output, every
    layer's heads and heads' average equal to the answer's rows, each row summing to 1;
  * each head's mean entropy and agreement with the GRU as recomputed here from the answer's
    weights (the overlap: the mean over rows of sum_j min(head_j, gru_j)).
A screenshot is saved as BUILD_DIR/serve-explorer.png (CI keeps it). Exits 77 (SKIP) with the
reason when Chromium, chromedriver or Selenium is missing, or the build has no HTTP server.

Usage: test_tools_serve_browser.py PATH/TO/seqgrad DATA_DIR SCREENSHOT_PATH
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import TINY_TRANSFORMER, Server, mean_entropy, overlap, train_tiny, translate_cli  # noqa: E402

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
        transformer = train_tiny(seqgrad, data, tmp, run="transformer", flags=TINY_TRANSFORMER)
        expected = translate_cli(seqgrad, ckpt, [SENTENCE])[0]
        expected_beam = translate_cli(seqgrad, ckpt, [SENTENCE], "--beam", "3")[0]
        heads = json.loads(translate_cli(seqgrad, transformer, [SENTENCE], "--json", "--per-head")[0])
        expected_transformer = (heads["translation"],
                                translate_cli(seqgrad, transformer, [SENTENCE], "--beam", "3")[0])
        server = Server(seqgrad, "--checkpoint", ckpt, transformer, "--threads", "1")
        try:
            run_page(drv, server.url, expected, expected_beam, screenshot)
            run_transformer_page(drv, server, heads, expected_transformer)
            run_side_by_side_page(drv, server, (ckpt, transformer), (expected, expected_transformer[0]))
        finally:
            drv.quit()
            status, _, err = server.stop()
            check(status == 0, f"the server exited with {status}: {err}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("explorer: translation, heatmap, hover, cell details, energy terms, step-through and beam tree as expected; "
          "a Transformer's heads, self-attention, terms and diagnostics equal the server's JSON; side by side, each "
          "head's entropy and agreement with the GRU as recomputed from the JSON; screenshot", screenshot)


def run_page(drv, url, expected, expected_beam, screenshot):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    drv.get(url + "/")
    wait = WebDriverWait(drv, 30)
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
    drv.find_element(By.ID, "src").send_keys(SENTENCE)
    panel = translate_on_page(drv, wait, expected, "greedy")

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
    # ... and the terms of the clicked cell's energy, which add up to it
    check_energy_terms(panel)

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
    check(not panel.find_elements(By.CSS_SELECTOR, ".beam-tree"), "a beam tree for greedy decoding")

    # beam 3: the beam search's translation and its tree
    beam = drv.find_element(By.ID, "beam")
    beam.clear()
    beam.send_keys("3")
    panel = translate_on_page(drv, wait, expected_beam, "beam 3")
    rows = panel.find_elements(By.CSS_SELECTOR, "th.tgt")
    nodes = panel.find_elements(By.CSS_SELECTOR, ".beam-tree g.node")
    best = panel.find_elements(By.CSS_SELECTOR, ".beam-tree g.node.best")
    check(len(nodes) > len(rows), f"the beam tree has {len(nodes)} nodes for {len(rows)} output tokens")
    check(len(best) == len(rows), f"the best path has {len(best)} nodes, the translation {len(rows)} tokens")
    check("finished" in best[-1].get_attribute("class"), "the best path does not end in a finished node")
    panel.find_element(By.CSS_SELECTOR, "td.cell[data-row='0'][data-col='1']").click()
    check_energy_terms(panel)
    ActionChains(drv).move_to_element(rows[0]).perform()
    os.makedirs(os.path.dirname(os.path.abspath(screenshot)), exist_ok=True)
    drv.set_window_size(1200, 1400)
    drv.save_screenshot(screenshot)


def translate_on_page(drv, wait, expected, what, model=0):
    """Presses Translate; returns checkpoint `model`'s panel, its translation checked."""
    from selenium.webdriver.common.by import By
    drv.find_element(By.ID, "go").click()
    wait.until(lambda d: d.find_element(By.ID, "panels").get_attribute("data-state") == "done")
    status = drv.find_element(By.ID, "status").text
    check(status == "", f"{what}: the page shows an error: {status}")
    panel = drv.find_element(By.CSS_SELECTOR, f".panel[data-model='{model}']")
    got = panel.find_element(By.CSS_SELECTOR, ".translation").text
    check(got == expected, f"{what}: the page's translation {got!r} differs from seqgrad translate's {expected!r}")
    return panel


def check_energy_terms(panel):
    from selenium.webdriver.common.by import By
    import re
    text = panel.find_element(By.CSS_SELECTOR, ".energy-terms .energy-check").text
    m = re.match(r"sum (-?[0-9.]+); the decoder's energy (-?[0-9.]+)", text)
    check(m and abs(float(m.group(1)) - float(m.group(2))) < 2e-4, f"the energy's terms: {text!r}")
    terms = panel.find_elements(By.CSS_SELECTOR, ".energy-terms tr")
    check(len(terms) >= 3, f"{len(terms)} rows of energy terms")


def shown_map(drv, panel):
    """The heatmap on show: per row, each cell's weight (None for a masked one)."""
    return drv.execute_script("""
        const rows = [];
        arguments[0].querySelectorAll("table.heatmap tr[data-row]").forEach(tr => rows.push(
            [...tr.querySelectorAll("td.cell")].map(c => c.classList.contains("masked") ? null
                                                                                        : Number(c.dataset.weight))));
        return rows;""", panel)


def check_map(found, expected, what, causal=False):
    """The page's map equals the JSON's rows (a causal row's later cells masked), each row summing to 1."""
    check(len(found) == len(expected), f"{what}: {len(found)} rows on the page, {len(expected)} in the JSON")
    for i, (row, want) in enumerate(zip(found, expected)):
        shown = [w for w in row if w is not None]
        check(len(shown) == len(want), f"{what}, row {i}: {len(shown)} cells shown, {len(want)} in the JSON")
        check(not causal or all(w is None for w in row[i + 1:]), f"{what}, row {i}: a later position is not masked")
        check(all(abs(a - b) < 1e-6 for a, b in zip(shown, want)), f"{what}, row {i}: {shown} != {want}")
        check(abs(sum(shown) - 1) < 1e-4, f"{what}, row {i} sums to {sum(shown)}")


def select(drv, panel, view, layer, head):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    for cls, value in [("sel-view", view), ("sel-layer", layer), ("sel-head", head)]:
        Select(panel.find_element(By.CSS_SELECTOR, f"select.{cls}")).select_by_value(str(value))


def run_transformer_page(drv, server, cli, expected):
    """The Transformer's panel (model 1) against the server's answer to the page's request."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    wait = WebDriverWait(drv, 30)
    beam = drv.find_element(By.ID, "beam")
    beam.clear()
    beam.send_keys("1")
    panel = translate_on_page(drv, wait, expected[0], "Transformer, greedy", model=1)
    status, _, answer = server.request("/v1/translate", {"src": [SENTENCE], "model": 1, "beam": 1, "explain": True})
    check(status == 200, f"explain: {status} {answer}")
    s = answer["translations"][0]
    heads, internals = s["attention"]["heads"], s["internals"]
    check(heads == cli["attention"]["heads"], "the server's attention.heads differ from translate --json --per-head's")
    layers, count = heads["layers"], heads["heads"]
    check((layers, count) == (2, 4), f"{layers} layers of {count} heads")

    # the map opens on the last layer's head average: the answer's attention weights
    check_map(shown_map(drv, panel), s["attention"]["weights"], "the opening map (last layer, average)")
    sums = 0
    for layer in range(layers):
        for head in range(count):
            what = f"layer {layer + 1} head {head + 1}"
            select(drv, panel, "cross", layer, head)
            check_map(shown_map(drv, panel), heads["cross"][layer][head]["weights"], what)
            # every cell clicked: its terms add up to the answer's energy, the row's softmax to its weight
            for i, j, total, energy, weight, softmax in drv.execute_script("""
                const out = [];
                arguments[0].querySelectorAll("table.heatmap td.cell").forEach(c => {
                  c.click();
                  const check = arguments[0].querySelector(".energy-terms .energy-check").textContent;
                  const soft = arguments[0].querySelector(".energy-terms .softmax").textContent;
                  const m = check.match(/sum (-?[0-9.]+); the decoder's energy (-?[0-9.]+); .* = (-?[0-9.]+)$/);
                  out.push([Number(c.dataset.row), Number(c.dataset.col), Number(m[1]), Number(m[2]), Number(m[3]),
                            Number(soft.match(/= (-?[0-9.]+) \\(/)[1])]);
                });
                return out;""", panel):
                want = internals["scores"][layer][head][i][j]
                check(abs(total - energy) < 2e-4, f"{what}, cell ({i}, {j}): the terms sum to {total}, energy {energy}")
                check(abs(energy - want) < 1e-4, f"{what}, cell ({i}, {j}): energy {energy} shown, {want} in the JSON")
                check(abs(softmax - weight) < 2e-4 and abs(weight - heads["cross"][layer][head]["weights"][i][j]) < 1e-4,
                      f"{what}, cell ({i}, {j}): softmax {softmax}, weight {weight}")
                sums += 1
        select(drv, panel, "cross", layer, -1)
        average = [[sum(heads["cross"][layer][h]["weights"][i][j] for h in range(count)) / count
                    for j in range(len(heads["src"]))] for i in range(len(heads["tgt"]))]
        check_map(shown_map(drv, panel), average, f"layer {layer + 1}, the heads' average")
        for head in range(count):
            select(drv, panel, "encoder", layer, head)
            check_map(shown_map(drv, panel), heads["encoder_self"][layer][head], f"encoder layer {layer + 1}")
            select(drv, panel, "decoder", layer, head)
            check_map(shown_map(drv, panel), heads["decoder_self"][layer][head], f"decoder layer {layer + 1}",
                      causal=True)
    check(sums == layers * count * len(heads["src"]) * len(heads["tgt"]), f"{sums} cells' terms checked")

    # the per-head diagnostics: the answer's, and a row selects its head
    rows = panel.find_elements(By.CSS_SELECTOR, "table.head-diagnostics tr[data-head]")
    check(len(rows) == layers * count, f"{len(rows)} rows of head diagnostics")
    for row in rows:
        c = heads["cross"][int(row.get_attribute("data-layer"))][int(row.get_attribute("data-head"))]
        cells = [td.text for td in row.find_elements(By.CSS_SELECTOR, "td")]
        check(cells[2] == f"{c['mean_entropy']:.3f}" and cells[4] == f"{c['agreement']:.3f}",
              f"head diagnostics {cells} for {c['mean_entropy']}, {c['agreement']}")
    rows[5].click()
    check(panel.find_element(By.CSS_SELECTOR, "select.sel-head").get_attribute("value") == "1" and
          panel.find_element(By.CSS_SELECTOR, "select.sel-layer").get_attribute("value") == "1",
          "clicking layer 2 head 2's diagnostics does not select it")
    check_map(shown_map(drv, panel), heads["cross"][1][1]["weights"], "layer 2 head 2, selected by its diagnostics")

    # the stepper reaches <eos> with the top-5
    nxt = panel.find_element(By.CSS_SELECTOR, ".step-next")
    for _ in range(len(heads["tgt"]) - 1):
        nxt.click()
    stepper = panel.find_element(By.CSS_SELECTOR, ".stepper")
    check(stepper.get_attribute("data-token") == "<eos>", f"the last step is {stepper.get_attribute('data-token')!r}")
    check(len(panel.find_elements(By.CSS_SELECTOR, ".step-topk tr")) == 5, "no top-5 at the last step")

    # beam 3: the beam search's translation and its tree
    beam = drv.find_element(By.ID, "beam")
    beam.clear()
    beam.send_keys("3")
    panel = translate_on_page(drv, wait, expected[1], "Transformer, beam 3", model=1)
    check(len(panel.find_elements(By.CSS_SELECTOR, ".beam-tree g.node.best")) ==
          len(panel.find_elements(By.CSS_SELECTOR, "th.tgt")), "the best path is not one node per output token")


def run_side_by_side_page(drv, server, names, expected):
    """Side by side: the GRU's map and the Transformer replayed along its output, against the answer."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    wait = WebDriverWait(drv, 30)
    toggle = drv.find_element(By.ID, "side-by-side")
    check(toggle.is_displayed(), "no side-by-side checkbox with a GRU and a Transformer served")
    toggle.click()
    beam = drv.find_element(By.ID, "beam")
    beam.clear()
    beam.send_keys("1")
    drv.find_element(By.ID, "go").click()
    wait.until(lambda d: d.find_element(By.ID, "panels").get_attribute("data-state") == "done")
    check(drv.find_element(By.ID, "status").text == "", drv.find_element(By.ID, "status").text)
    panel = drv.find_element(By.CSS_SELECTOR, ".panel.side-by-side")
    status, _, a = server.request("/v1/side_by_side", {"src": SENTENCE, "models": list(names), "beam": 1})
    check(status == 200, f"side by side: {status} {a}")
    check((a["gru"]["translation"], a["transformer"]["translation"]) == expected,
          f"side by side translates {a['gru']['translation']!r}, {a['transformer']['translation']!r}")
    check(panel.find_element(By.CSS_SELECTOR, ".sbs-gru-translation").text == expected[0], "the GRU's translation")
    gru = a["gru"]["attention"]["weights"]
    column = panel.find_element(By.CSS_SELECTOR, ".sbs-gru")
    check_map(shown_map(drv, column), gru, "side by side, the GRU")
    shown = column.find_element(By.CSS_SELECTOR, ".diagnostics").text
    check(f"mean entropy (nats) {mean_entropy(gru):.3f}" in shown, f"the GRU's diagnostics: {shown!r}")
    heads = a["transformer_on_gru_output"]["attention"]["heads"]
    check(heads["tgt"] == a["gru"]["attention"]["tgt"], "the replayed Transformer's rows are not the GRU's output")
    column = panel.find_element(By.CSS_SELECTOR, ".sbs-transformer")
    for layer, maps in enumerate(heads["cross"]):
        average = [[sum(col) / len(maps) for col in zip(*rows)] for rows in zip(*[c["weights"] for c in maps])]
        for head, weights in list(enumerate(c["weights"] for c in maps)) + [(-1, average)]:
            what = f"side by side, layer {layer + 1} head {head + 1 if head >= 0 else 'average'}"
            select_sbs(column, layer, head)
            check_map(shown_map(drv, column), weights, what)
            agreement = f"{overlap(weights, gru):.3f}"
            text = column.find_element(By.CSS_SELECTOR, ".sbs-shown-agreement").text
            check(text == f"agreement with the GRU: {agreement}", f"{what}: {text!r}, recomputed {agreement}")
            row = column.find_element(By.CSS_SELECTOR, f"table.sbs-heads tr[data-layer='{layer}'][data-head='{head}']")
            cells = {k: row.find_element(By.CSS_SELECTOR, f"td.{k}").text for k in ("entropy", "agreement")}
            want = {"entropy": f"{mean_entropy(weights):.3f}" if head >= 0 else "-", "agreement": agreement}
            check(cells == want and "selected" in row.get_attribute("class"), f"{what}: the table shows {cells}, {want}")
    row = column.find_element(By.CSS_SELECTOR, "table.sbs-heads tr[data-layer='0'][data-head='2']")
    row.click()
    check_map(shown_map(drv, column), heads["cross"][0][2]["weights"], "layer 1 head 3, selected by its row")


def select_sbs(column, layer, head):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    Select(column.find_element(By.CSS_SELECTOR, "select.sel-layer")).select_by_value(str(layer))
    Select(column.find_element(By.CSS_SELECTOR, "select.sel-head")).select_by_value(str(head))


if __name__ == "__main__":
    main()
