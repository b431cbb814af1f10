"""A real browser (Debian's headless Chromium, driven by selenium) loads the app, runs a race and takes a screenshot.

Skipped with the reason when chromium, chromedriver or selenium is missing. Environment knobs:
  MARS_SCREENSHOT=1               also save the screenshots to assets/ (race.png, batch.png, race_acceptance.png,
                                  walkthrough_verified.png)
  MARS_SCREENSHOT_MODEL=default   serve the real default model instead of a tiny random one (or any --model value)
  MARS_SCREENSHOT_PROMPT=...      the prompt to race
  MARS_SCREENSHOT_THRESHOLD=0.9   the threshold (default 0.3: the tiny model then commits several tokens per forward)
  MARS_SCREENSHOT_MAX_NEW_TOKENS=64
  MARS_SCREENSHOT_FORWARD=2       the forward of the verified walkthrough to save (walkthrough_verified.png)
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from test_app_e2e import ROOT, launched_app, save_tiny_model

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
except ImportError:
    selenium = None

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None or selenium is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver) and "
    "selenium (pip install selenium)",
)
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1440,1700",
)


@pytest.fixture()
def driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(60)
    yield browser
    browser.quit()


def set_number(driver, elem_id: str, value: str) -> None:
    """Type a value into a slider's number box and leave it, as a user would."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, f"#{elem_id} input[type=number]")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(value, Keys.TAB)


def visible_errors(driver) -> list[str]:
    """Error badges or toasts Gradio shows on the page (the text of each visible one)."""
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.XPATH, "//*[normalize-space(text())='Error' or contains(@class, 'error')]")
    return [e.text or e.get_attribute("class") for e in found if e.is_displayed()]


def toasts(driver) -> list[str]:
    """The text of each toast on the page."""
    from selenium.webdriver.common.by import By

    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "[data-testid=toast-text]") if e.text]


def screenshot_model(tmp_path) -> tuple[str | None, float]:
    """The --model to serve (MARS_SCREENSHOT_MODEL; "default": the embedded model; unset: a tiny random one) and
    how long to wait for it: a real model loads and decodes for minutes on this CPU."""
    model = os.environ.get("MARS_SCREENSHOT_MODEL")
    model = None if model == "default" else model or str(save_tiny_model(tmp_path / "tiny"))
    return model, 600 if model is None or os.environ.get("MARS_SCREENSHOT_MODEL") else 120


def screenshot(driver, tmp_path, name: str) -> None:
    """Save the page as tmp_path/name, and with MARS_SCREENSHOT=1 also as assets/name (the README's pictures)."""
    shot = tmp_path / name
    assert driver.save_screenshot(str(shot))
    print(f"screenshot: {shot}")
    if os.environ.get("MARS_SCREENSHOT"):
        target = ROOT / "assets" / name
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, target)
        print(f"saved {target}")


def test_race_in_a_browser(driver, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    model, timeout = screenshot_model(tmp_path)
    prompt = os.environ.get("MARS_SCREENSHOT_PROMPT", "Count from one to ten")
    with launched_app(model, timeout=timeout) as url:
        driver.get(url)
        wait = WebDriverWait(driver, timeout)
        box = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#race-prompt textarea")))
        box.clear()
        box.send_keys(prompt)
        set_number(driver, "race-threshold", os.environ.get("MARS_SCREENSHOT_THRESHOLD", "0.3"))
        set_number(driver, "race-max-new", os.environ.get("MARS_SCREENSHOT_MAX_NEW_TOKENS", "64"))
        time.sleep(0.5)
        driver.find_element(By.CSS_SELECTOR, "#race-run").click()
        wait.until(lambda d: "done" in d.find_element(By.ID, "race-stats").text)
        time.sleep(1.0)  # let the last chart update paint
        panes = [driver.find_element(By.ID, f"{key}-pane") for key in ("ar", "mars", "verified")]
        for pane in panes:
            assert pane.find_elements(By.CSS_SELECTOR, "span[title^='forward 0']")
        plots = driver.find_elements(By.CSS_SELECTOR, "#forwards-plot .js-plotly-plot, #time-plot .js-plotly-plot")
        assert len(plots) == 2
        assert not visible_errors(driver)
        for element in (*panes, plots[0]):
            assert element.is_displayed()
            assert element.rect["y"] + 40 < driver.get_window_size()["height"], "scrolled out of the screenshot"
        screenshot(driver, tmp_path, "race.png")


def start_race(driver, url: str, prompt: str, threshold: str, max_new: str, timeout: float = 120):
    """Open the app, type a prompt and settings, press Run; return the page's WebDriverWait."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    wait = WebDriverWait(driver, timeout)
    box = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#race-prompt textarea")))
    box.clear()
    box.send_keys(prompt)
    set_number(driver, "race-threshold", threshold)
    set_number(driver, "race-max-new", max_new)
    time.sleep(0.5)
    driver.find_element(By.CSS_SELECTOR, "#race-run").click()
    return wait


def test_stop_in_a_browser_ends_the_race_cleanly(driver, tmp_path):
    """Stop mid-race: no error badge anywhere, the status says stopped, the panes keep what was generated."""
    from selenium.webdriver.common.by import By

    slower = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=8)
    with launched_app(str(save_tiny_model(tmp_path / "tiny", **slower))) as url:  # still racing when Stop comes
        wait = start_race(driver, url, "Count from one to ten", "1", "512")
        wait.until(lambda d: len(d.find_element(By.ID, "ar-pane").find_elements(By.CSS_SELECTOR, "span[title]")) > 20)
        driver.find_element(By.CSS_SELECTOR, "#race-stop").click()
        wait.until(lambda d: "stopped" in d.find_element(By.ID, "race-stats").text)
        time.sleep(1.5)  # anything Gradio would still paint (badges on cancelled outputs) has painted by now
        assert not visible_errors(driver)
        kept = driver.find_element(By.ID, "ar-pane").find_elements(By.CSS_SELECTOR, "span[title]")
        assert 20 < len(kept) < 512 and "stopped" in driver.find_element(By.ID, "ar-pane").text
        plots = driver.find_elements(By.CSS_SELECTOR, "#forwards-plot .js-plotly-plot, #time-plot .js-plotly-plot")
        assert len(plots) == 2


def test_an_out_of_range_value_gives_one_message_and_no_run(driver, tmp_path):
    """τ = 1.5 typed into the slider's box: one clear message, nothing decoded (no clamped run behind it)."""
    from selenium.webdriver.common.by import By

    with launched_app(str(save_tiny_model(tmp_path / "tiny"))) as url:
        wait = start_race(driver, url, "Count from one to ten", "1.5", "32")
        wait.until(lambda d: "Threshold must be in (0, 1]" in d.find_element(By.ID, "race-stats").text)
        time.sleep(1.5)
        for key in ("ar", "mars", "verified"):
            assert not driver.find_element(By.ID, f"{key}-pane").find_elements(By.CSS_SELECTOR, "span[title]")
        assert len([x for x in toasts(driver) if "Threshold must be" in x]) == 1
        assert "greater than maximum" not in driver.page_source  # Gradio's own check no longer speaks first


def test_a_value_on_its_way_gives_no_message(driver, tmp_path):
    """Typing 0.3 passes through "0" (out of range), and that change reaches the server when the machine is slow:
    no message for it, the finished 0.3 is taken; a finished 1.5 left in the box still gets its one message."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with launched_app(str(save_tiny_model(tmp_path / "tiny"))) as url:
        start_race(driver, url, "Count from one to ten", "1", "16")
        box = driver.find_element(By.CSS_SELECTOR, "#race-threshold input[type=number]")
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys("0")
        time.sleep(1.5)  # the change for "0" has gone to the server and back
        box.send_keys(".3", Keys.TAB)
        time.sleep(1.5)
        assert not visible_errors(driver)
        set_number(driver, "race-threshold", "1.5")
        time.sleep(1.5)
        assert [x for x in toasts(driver) if "Threshold must be in (0, 1]" in x] == [
            "Threshold must be in (0, 1] (1 = one token per forward), got 1.5."]


def test_batch_in_a_browser(driver, tmp_path):
    """The Batch tab: one batch, block-cached MARS against AR, per-sample panes and the block-slot heatmap."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    model, timeout = screenshot_model(tmp_path)
    with launched_app(model, timeout=timeout) as url:
        driver.get(url)
        wait = WebDriverWait(driver, timeout)
        tab = wait.until(ec.element_to_be_clickable((By.XPATH, "//button[@role='tab' and normalize-space()='Batch']")))
        tab.click()
        set_number(driver, "batch-threshold", os.environ.get("MARS_SCREENSHOT_THRESHOLD", "0.3"))
        set_number(driver, "batch-max-new", os.environ.get("MARS_SCREENSHOT_MAX_NEW_TOKENS", "48"))
        time.sleep(0.5)
        driver.find_element(By.CSS_SELECTOR, "#batch-run").click()
        wait.until(lambda d: "done" in d.find_element(By.ID, "batch-stats").text)
        time.sleep(1.5)  # the last chart update paints
        assert not visible_errors(driver)
        assert driver.find_elements(By.CSS_SELECTOR, "#batch-plot .js-plotly-plot")
        assert len(driver.find_element(By.ID, "batch-panes").find_elements(By.CSS_SELECTOR, "span[title]")) > 20
        driver.execute_script("document.getElementById('batch-panes').scrollIntoView()")  # panes and heatmap
        time.sleep(0.5)
        screenshot(driver, tmp_path, "batch.png")


def test_acceptance_in_a_browser(driver, tmp_path):
    """The verified lane's acceptance chart under the race, drawn once the race is done (saved as
    race_acceptance.png)."""
    from selenium.webdriver.common.by import By

    model, timeout = screenshot_model(tmp_path)
    prompt = os.environ.get("MARS_SCREENSHOT_PROMPT", "Count from one to ten")
    with launched_app(model, timeout=timeout) as url:
        wait = start_race(driver, url, prompt, os.environ.get("MARS_SCREENSHOT_THRESHOLD", "0.3"),
                          os.environ.get("MARS_SCREENSHOT_MAX_NEW_TOKENS", "64"), timeout)
        wait.until(lambda d: "done" in d.find_element(By.ID, "race-stats").text)
        time.sleep(1.5)  # the last chart update paints
        assert not visible_errors(driver)
        chart = driver.find_element(By.CSS_SELECTOR, "#acceptance-plot .js-plotly-plot")
        title = chart.find_element(By.CSS_SELECTOR, ".gtitle").text
        assert "MARS verified" in title and ("mean accepted length" in title or "no drafts checked" in title)
        if "mean accepted length" in title:
            assert chart.find_elements(By.CSS_SELECTOR, ".bars .point")  # a bar per draft position
        driver.execute_script("document.getElementById('acceptance-plot').scrollIntoView({block: 'end'})")
        time.sleep(0.5)
        box = driver.execute_script("return document.getElementById('acceptance-plot').getBoundingClientRect()")
        assert 0 <= box["top"] and box["bottom"] <= driver.execute_script("return window.innerHeight") + 1
        screenshot(driver, tmp_path, "race_acceptance.png")


def test_verified_walkthrough_in_a_browser(driver, tmp_path):
    """The Walkthrough tab's verified decode: Decode verified, then forward by forward, the view and the tree mask
    it fed (saved as walkthrough_verified.png, on the forward MARS_SCREENSHOT_FORWARD, default 2)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    model, timeout = screenshot_model(tmp_path)
    forward = int(os.environ.get("MARS_SCREENSHOT_FORWARD", "2"))
    with launched_app(model, timeout=timeout) as url:
        driver.get(url)
        wait = WebDriverWait(driver, timeout)
        tab = wait.until(ec.element_to_be_clickable(
            (By.XPATH, "//button[@role='tab' and normalize-space()='Walkthrough']")))
        tab.click()
        button = wait.until(ec.element_to_be_clickable((By.ID, "walkv-decode")))
        driver.execute_script("arguments[0].scrollIntoView()", button)
        button.click()
        wait.until(lambda d: "Forward 1 of" in d.find_element(By.ID, "walkv-view").text)
        for k in range(2, forward + 1):
            driver.find_element(By.ID, "walkv-next").click()
            wait.until(lambda d, k=k: f"Forward {k} of" in d.find_element(By.ID, "walkv-view").text)
        time.sleep(1.5)  # the mask figure paints
        assert not visible_errors(driver)
        view = driver.find_element(By.ID, "walkv-view").text
        assert "Verify, left to right" in view and "Why this tree" in view and "The next drafts" in view
        assert driver.find_elements(By.CSS_SELECTOR, "#walkv-mask .js-plotly-plot")
        title = driver.find_element(By.CSS_SELECTOR, "#walkv-mask .gtitle").text
        assert f"Forward {forward}: the mask it fed" in title
        driver.execute_script("document.getElementById('walkv-forward').scrollIntoView()")
        time.sleep(0.5)
        screenshot(driver, tmp_path, "walkthrough_verified.png")
