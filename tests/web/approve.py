"""The approver's page in a real headless Chromium (Debian's chromium and chromium-driver, driven
by the pinned selenium): a person logs in with their token, sees every daemon's waiting request
in one queue (the second arriving while the page is open: it shows it without being reloaded by
anyone but itself), approves one, is refused the one their own agent asked for (it needs another
person), and another person denies it with a reason. Prints what the page said, as JSON; writes a
screenshot of the queue as a phone shows it.

Usage: approve.py URL ALICE_TOKEN BOB_TOKEN SCREENSHOT ARRIVE

ARRIVE: a file this script creates once the page is open with one request; the test then makes
beta's request arrive.
"""

import json
import sys
import tempfile
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

url, alice, bob, screenshot, arrive = sys.argv[1:6]

options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
profile = tempfile.mkdtemp(prefix="fsd-approver-chromium-")
for arg in (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    # The test's own CA signed the page's certificate; the browser has no way to know it.
    "--ignore-certificate-errors",
    # A phone's viewport: the page must be usable there.
    "--window-size=412,915",
    f"--user-data-dir={profile}",
):
    options.add_argument(arg)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
driver.set_page_load_timeout(30)


def settle(find):
    """What `find` finds once the page that a click asked for has replaced the one before."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return find()
        except WebDriverException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def login(token):
    driver.get(url + "/")
    settle(lambda: driver.find_element(By.NAME, "token")).send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()
    settle(lambda: driver.find_element(By.ID, "status"))


def sections():
    return driver.find_elements(By.CSS_SELECTOR, "section.request")


def wait_for(count):
    deadline = time.monotonic() + 60
    while True:
        try:
            found = len(sections())
        except (StaleElementReferenceException, WebDriverException):
            found = -1
        if found == count:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the page shows {found} requests, not {count}: {driver.page_source}")
        time.sleep(0.2)
        driver.get(url + "/")


def arrives(count, within):
    """Waits `within` seconds, touching nothing, for the open page to show `count` requests: the
    page's own script must notice the queue changed. Says how the shown page was loaded."""
    deadline = time.monotonic() + within
    while True:
        try:
            found = len(sections())
        except (StaleElementReferenceException, WebDriverException):
            found = -1
        if found == count:
            return driver.execute_script("return performance.getEntriesByType('navigation')[0].type")
        if time.monotonic() > deadline:
            raise SystemExit(f"the open page shows {found} requests, not {count}, {within} s after one arrived: {driver.page_source}")
        time.sleep(0.2)


def section(sandbox):
    for s in sections():
        if s.find_element(By.TAG_NAME, "h2").text.startswith(sandbox + ":"):
            return s
    raise SystemExit(f"no request of {sandbox} on the page: {driver.page_source}")


def decide(sandbox, decision, reason):
    driver.get(url + "/")
    s = section(sandbox)
    if reason:
        s.find_element(By.NAME, "reason").send_keys(reason)
    s.find_element(By.CSS_SELECTOR, f"button[value='{decision}']").click()
    # The answer is a page of its own.
    return settle(lambda: {
        "outcome": driver.find_element(By.ID, "outcome").text,
        "title": driver.find_element(By.TAG_NAME, "h1").text,
    })


try:
    said = {}
    login(alice)
    # alpha's read of its target waits; the page is opened once (by this script: "navigate")...
    wait_for(1)
    driver.get(url + "/")
    said["opened"] = driver.execute_script("return performance.getEntriesByType('navigation')[0].type")
    said["before"] = len(sections())
    # ...then beta's read arrives, and the open page shows it without this script reloading it
    # (the page's script reloads itself: "reload").
    open(arrive, "w").close()
    said["arrived"] = arrives(2, 15)
    # alpha's read and beta's read: one queue.
    said["status"] = driver.find_element(By.ID, "status").text
    said["logged_in"] = driver.find_element(By.TAG_NAME, "header").text
    said["alpha_read"] = decide("alpha", "approve", "")
    said["beta_by_alice"] = decide("beta", "deny", "not on Fridays")
    # Then alpha's write, with its diff.
    wait_for(2)
    alpha = section("alpha")
    said["alpha_added"] = [e.text for e in alpha.find_elements(By.CSS_SELECTOR, "span.add")]
    said["alpha_pre"] = alpha.find_element(By.TAG_NAME, "pre").text
    said["scripts"] = driver.execute_script("return document.scripts.length")
    said["external"] = driver.execute_script("return document.querySelectorAll('[src],link[href]').length")
    said["styled"] = driver.execute_script("return getComputedStyle(document.querySelector('button.approve')).backgroundColor")
    said["live"] = driver.execute_script("return document.documentElement.dataset.live || ''")
    said["width"] = driver.execute_script("return document.documentElement.scrollWidth")
    said["viewport"] = driver.execute_script("return window.innerWidth")
    driver.save_screenshot(screenshot)
    said["alpha"] = decide("alpha", "approve", "")
    driver.get(url + "/")
    driver.find_element(By.CSS_SELECTOR, "form[action='/logout'] button").click()
    settle(lambda: driver.find_element(By.NAME, "token"))
    login(bob)
    said["beta"] = decide("beta", "deny", "not on Fridays")
    driver.get(url + "/")
    said["after"] = driver.find_element(By.ID, "status").text
    print(json.dumps(said))
finally:
    driver.quit()
