"""The trace viewer page: built from a real trace, offline, and driven in a real headless browser
(Debian's chromium through selenium): a click on a framework op lights up its path through the layers."""

import re
import shutil
import threading
import urllib.request

import pytest

import lapis
from lapis import viewer
from lapis.cli import main


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("viewer")
    a = lapis.randn(64, 64, device="cuda")
    (a @ a).cpu()                                                   # compiled before the record
    with lapis.profiler.profile(record_shapes=True) as prof:
        (a @ a).relu().sum().item()
    trace = tmp / "trace.json"
    prof.export_chrome_trace(str(trace))
    out = tmp / "view.html"
    assert main(["view", str(trace), "--html", str(out)]) == 0
    return out


def test_the_page_is_self_contained(page_file):
    html = page_file.read_text()
    assert "traceEvents" in html and "<script src" not in html and "<link" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:|url\(\s*["']?https?:|import\s*\(""", html)


@pytest.mark.slow
def test_a_click_on_an_op_lights_up_its_path(page_file, tmp_path):
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, "the browser test needs Debian's chromium and chromium-driver (make test " \
                                     "installs them)"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.binary_location = chromium
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        browser.get(page_file.as_uri())
        ops = browser.find_elements("css selector", "button.op")
        names = [b.text.split()[0] for b in ops]
        assert "matmul" in names and "Relu" in names and "Sum" in names
        assert not browser.find_elements("css selector", ".layer.lit")          # nothing lit before a click
        ops[names.index("matmul")].click()
        values = {}
        for layer in range(6):
            box = browser.find_element("css selector", f'.layer[data-layer="{layer}"]')
            assert "lit" in box.get_attribute("class").split(), layer
            values[layer] = box.find_element("css selector", ".values").get_attribute("textContent")
        assert "matmul" in values[5] and "a_shape=[64,64]" in values[5]
        assert "sgemm" in values[4] and "m=64" in values[4]
        assert "launch: kernel=gemm_kernel" in values[3] and "kernarg_hex=" in values[3]
        assert '"type":"KERNEL_DISPATCH"' in values[2] and "bytes_hex=" in values[2]
        assert "doorbell" in values[1]
        assert values[0].startswith("gemm_kernel") and "limiter=" in values[0] and "/*0000*/" in values[0]
        assert "matmul" in browser.find_element("css selector", "button.op.selected").text
        assert browser.find_elements("css selector", "#timeline rect#window")
        shot = tmp_path / "viewer.png"
        assert browser.save_screenshot(str(shot)) and shot.read_bytes().startswith(b"\x89PNG")
        assert shot.stat().st_size > 20_000
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        browser.quit()


def test_view_serves_the_page_on_localhost(page_file):
    html = viewer.page(viewer.load(str(page_file.parent / "trace.json")))
    started = threading.Event()
    servers = []

    def ready(server):
        servers.append(server)
        started.set()
    threading.Thread(target=viewer.serve, args=(html, 0, ready), daemon=True).start()
    assert started.wait(10)
    try:
        port = servers[0].server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/html") and response.read().decode() == html
    finally:
        servers[0].shutdown()


def test_view_rejects_what_is_not_a_trace(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"events": []}')
    assert main(["view", str(bad), "--html", str(tmp_path / "x.html")]) == 1
    assert "not a Chrome trace" in capsys.readouterr().err
