#!/usr/bin/env python3
"""The playground page (GET /) in a real browser: Debian's headless chromium driven by Selenium
(python3-selenium + chromium-driver, no browser download) against `clefserve serve` with the
built-in demo model, --api-key and --cors-origin set (the page must work with both).

Checks: the page and its files come with the strict CSP, their content types and caching; a noul
and a choice question typed into the editor are answered, and the bars' values (and the chosen
option) equal a direct API call of the same request, which must also be the request the page shows
as raw JSON; token count, latency and the Server-Timing breakdown are shown; a request without
the key shows the 401 by the key field; a choice question with no options shows the server's 422
message by that question's options; Ctrl+Enter sends; every resource the page fetched is from its
own origin and no CSP violation happened; at phone width nothing overflows sideways. Screenshots
go to --out (ctest: <build>/browser/); --docs-screenshot also writes the answered two-question page
there (docs/playground.png).

Exit status: 0 passed, 1 failed, 77 skipped (chromium, chromedriver or selenium missing and CI is
not set; under CI=true a missing browser is a failure).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SKIP = 77
API_KEY = "playground-test-key"
OTHER_ORIGIN = "https://elsewhere.example"
EXPECTED_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
                "require-trusted-types-for 'script'; trusted-types 'none'")


def in_ci():
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def missing_tools(chromium, driver):
    missing = []
    if not chromium or not os.access(chromium, os.X_OK):
        missing.append("chromium (apt-get install chromium)")
    if not driver or not os.access(driver, os.X_OK):
        missing.append("chromedriver (apt-get install chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append(f"selenium for {sys.executable} (apt-get install python3-selenium; "
                       "run with /usr/bin/python3)")
    return missing


class Server:
    def __init__(self, binary, args, env_extra, log_path):
        env = dict(os.environ)
        env.update(env_extra)
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([binary, "serve", "--port", "0", *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        self.port = None
        deadline = time.time() + 300
        pat = re.compile(rb"listening.*port(?:=|\":)(\d+)")
        while time.time() < deadline:
            with open(log_path, "rb") as f:
                m = pat.search(f.read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("the server did not start:\n" + self.text_log())

    def text_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def http(url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, headers=headers or {},
                                 method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class Check:
    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        print(("ok    " if cond else "FAIL  ") + what, flush=True)
        if not cond:
            self.failures.append(what)
        return cond


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True, help="build/clefserve")
    ap.add_argument("--out", required=True, help="folder for screenshots and the server log")
    ap.add_argument("--docs-screenshot", help="also save the answered page here (docs/playground.png)")
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    ap.add_argument("--chromedriver", default=shutil.which("chromedriver"))
    a = ap.parse_args()

    missing = missing_tools(a.chromium, a.chromedriver)
    if missing:
        msg = "playground browser test: missing " + "; ".join(missing)
        if in_ci():
            print(msg + " -- CI is set, so this is a failure (scripts/setup.sh installs them)",
                  file=sys.stderr)
            return 1
        print(msg + " -- SKIPPED (not under CI)", file=sys.stderr)
        return SKIP

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    os.makedirs(a.out, exist_ok=True)
    check = Check()
    t_start = time.time()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(a.out, "cache")
    srv = Server(a.binary, ["--api-key", API_KEY, "--cors-origin", OTHER_ORIGIN],
                 {"XDG_CACHE_HOME": cache, "CLEF_API_KEY": ""}, os.path.join(a.out, "server.log"))
    origin = f"http://127.0.0.1:{srv.port}"
    driver = None
    profile = tempfile.mkdtemp(prefix="clef-chromium-")
    try:
        # ---- the files, over plain HTTP ----------------------------------------------------------
        status, headers, page = http(origin + "/")
        check(status == 200, f"GET / -> 200 without the key (got {status})")
        check(headers.get("Content-Security-Policy") == EXPECTED_CSP,
              f"GET / carries the strict CSP (got {headers.get('Content-Security-Policy')!r})")
        check(headers.get("Content-Type") == "text/html; charset=utf-8", "GET / is text/html")
        check(headers.get("Cache-Control") == "no-cache", "GET / is Cache-Control: no-cache")
        links = re.findall(rb'(?:src|href)="(/ui/[^"]+)"', page)
        check(len(links) == 3, f"the page links its script, style sheet and icon ({links})")
        types = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8",
                 "icon.svg": "image/svg+xml"}
        for link in links:
            link = link.decode()
            s, h, _ = http(origin + link)
            name = link.split("?")[0].rsplit("/", 1)[1]
            check(s == 200 and h.get("Content-Type") == types.get(name)
                  and h.get("Cache-Control") == "public, max-age=31536000, immutable"
                  and h.get("Content-Security-Policy") == EXPECTED_CSP,
                  f"GET {link} -> 200 {h.get('Content-Type')}, immutable, CSP")
        check(re.search(rb"<script>|<style>|\sstyle=|\son[a-z]+=", page) is None,
              "the page has no inline script, style or event handler")
        s, _, _ = http(origin + "/v1/models")
        check(s == 401, f"the API itself still needs the key (/v1/models -> {s})")

        # ---- the browser -------------------------------------------------------------------------
        opts = webdriver.ChromeOptions()
        opts.binary_location = a.chromium
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--window-size=1280,1000", "--hide-scrollbars", "--force-device-scale-factor=1",
                    "--no-first-run", "--disable-extensions", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--disable-default-apps",
                    "--metrics-recording-only", "--no-default-browser-check",
                    f"--user-data-dir={profile}", "--lang=en-US"):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(a.chromedriver), options=opts)
        driver.set_page_load_timeout(60)
        wait = WebDriverWait(driver, 60)
        driver.get(origin + "/")
        wait.until(lambda d: d.find_element(By.ID, "model").get_attribute("value") != "")
        check(driver.find_element(By.ID, "model").get_attribute("value") == "clef-demo",
              "the model field is filled from /health")
        check(driver.find_element(By.ID, "images").get_attribute("disabled") is not None,
              "the image upload is a disabled control")

        # Every control has a label.
        unlabelled = driver.execute_script("""
          return Array.from(document.querySelectorAll('input, select, textarea'))
            .filter(e => e.type !== 'radio' && !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
            .map(e => e.id || e.outerHTML);""")
        check(unlabelled == [], f"every input, select and textarea has a label ({unlabelled})")

        # Clear the example questions, then type a noul and a choice question.
        for b in driver.find_elements(By.CSS_SELECTOR, "#questions [data-role=remove]"):
            b.click()
        check(len(driver.find_elements(By.CSS_SELECTOR, "#questions > li")) == 0, "questions removed")

        def card(i):
            return driver.find_elements(By.CSS_SELECTOR, "#questions > li")[i]

        def typed(elem, text):
            elem.clear()
            elem.send_keys(text)

        driver.find_element(By.CSS_SELECTOR, "[data-add=noul]").click()
        c0 = card(0)
        check(driver.switch_to.active_element == c0.find_element(By.CSS_SELECTOR, "[data-role=qid]"),
              "adding a question focuses its id field")
        typed(c0.find_element(By.CSS_SELECTOR, "[data-role=qid]"), "down")
        typed(c0.find_element(By.CSS_SELECTOR, "[data-role=instructions]"), "Is a customer-facing service down?")
        driver.find_element(By.CSS_SELECTOR, "[data-add=choice]").click()
        c1 = card(1)
        typed(c1.find_element(By.CSS_SELECTOR, "[data-role=qid]"), "team")
        c1.find_element(By.CSS_SELECTOR, "[data-role=add-option]").click()
        options = [("payments", "The payments team"), ("platform", "The platform team"),
                   ("support", "Customer support")]
        rows = c1.find_elements(By.CSS_SELECTOR, "[data-role=options] > li")
        check(len(rows) == 3, f"three option rows ({len(rows)})")
        for row, (k, v) in zip(rows, options):
            typed(row.find_element(By.CSS_SELECTOR, "[data-role=okey]"), k)
            typed(row.find_element(By.CSS_SELECTOR, "[data-role=odesc]"), v)
        state_text = ("Checkout returns HTTP 503 for every EU customer since 09:12 UTC; the payments "
                      "dashboard shows a 40% error rate.")
        typed(driver.find_element(By.ID, "state"), state_text)
        expected_request = {
            "model": "clef-demo", "state": state_text,
            "questions": {"down": {"type": "noul", "instructions": "Is a customer-facing service down?"},
                          "team": {"type": "choice", "criteria": dict(options)}}}

        def exchanges():
            return int(driver.execute_script("return Number(document.body.dataset.exchanges || 0)"))

        def send(how="click"):
            n = exchanges()
            if how == "click":
                driver.find_element(By.ID, "send").click()
            else:
                driver.find_element(By.ID, "state").send_keys(Keys.CONTROL, Keys.ENTER)
            wait.until(lambda d: exchanges() > n)

        # Without the key: 401, shown by the key field.
        send()
        key_error = driver.find_element(By.ID, "api-key-error")
        check(key_error.is_displayed() and "401" in key_error.text,
              f"a request without the key shows the 401 by the key field ({key_error.text!r})")

        driver.find_element(By.ID, "api-key").send_keys(API_KEY)
        t0 = time.time()
        send()
        browser_s = time.time() - t0
        check(not driver.find_element(By.ID, "api-key-error").is_displayed(), "the 401 message is gone")
        raw_request = json.loads(driver.execute_script("return document.getElementById('raw-request').textContent"))
        check(raw_request == expected_request, f"the page sent the request that was typed ({raw_request})")

        status, headers, body = http(origin + "/v1/systemone", json.dumps(expected_request).encode(),
                                     {"Content-Type": "application/json",
                                      "Authorization": "Bearer " + API_KEY})
        check(status == 200, f"direct API call -> 200 ({status} {body[:200]!r})")
        api = json.loads(body)
        bars = driver.execute_script("""
          return Array.from(document.querySelectorAll('#answers li.bar')).map(b => ({
            q: b.dataset.question, o: b.dataset.option, v: Number(b.dataset.value),
            text: b.querySelector('.bar-value').textContent, chosen: b.classList.contains('chosen'),
            width: b.querySelector('.fill').getBoundingClientRect().width,
            track: b.querySelector('.track').getBoundingClientRect().width}));""")
        by_q = {}
        for b in bars:
            by_q.setdefault(b["q"], []).append(b)
        check(list(by_q) == ["down", "team"], f"bars for both questions, in order ({list(by_q)})")
        noul = api["answers"]["down"]["noul"]
        down = {b["o"]: b for b in by_q.get("down", [])}
        check("true" in down and abs(down["true"]["v"] - noul) < 1e-9,
              f"noul bar 'true' = API noul {noul} ({down.get('true', {}).get('v')})")
        check("false" in down and abs(down["false"]["v"] - (1 - noul)) < 1e-4, "noul bar 'false' = 1 - noul")
        check([o for o, b in down.items() if b["chosen"]] == ["true" if noul >= 0.5 else "false"],
              "the noul's side is highlighted")
        team = by_q.get("team", [])
        api_probs = api["answers"]["team"]["probabilities"]
        check([(b["o"], b["v"]) for b in team] == list(api_probs.items()),
              f"choice bars = API probabilities {api_probs} ({[(b['o'], b['v']) for b in team]})")
        check([b["o"] for b in team if b["chosen"]] == [api["answers"]["team"]["choice"]],
              f"the chosen option {api['answers']['team']['choice']} is highlighted")
        check(all(b["text"] == f"{b['v']:.4f}" for b in bars), "each bar shows its value")
        check(all(abs(b["width"] - b["v"] * b["track"]) <= 1.5 for b in bars),
              "each bar's length is its probability")
        tokens = driver.find_element(By.ID, "sum-tokens").text
        check(tokens == str(api["usage"]["input_tokens"]),
              f"the token count is shown ({tokens} vs {api['usage']['input_tokens']})")
        check(re.fullmatch(r"\d+\.\d ms", driver.find_element(By.ID, "sum-latency").text) is not None,
              f"the latency is shown ({driver.find_element(By.ID, 'sum-latency').text})")
        phases = driver.execute_script(
            "return Array.from(document.querySelectorAll('#timing-body tr')).map(r => r.dataset.phase)")
        check(phases == [p.split(";")[0].strip() for p in headers["Server-Timing"].split(",")]
              and "total" in phases and "forward" in phases,
              f"the Server-Timing breakdown is shown ({phases})")
        check(driver.find_element(By.ID, "sum-id").text not in ("", "—"), "the request id is shown")
        # The answered two-question page, from the top (the answer panel stays in view on a wide screen).
        driver.execute_script("window.scrollTo(0, 0); document.activeElement.blur();")
        time.sleep(0.2)
        driver.save_screenshot(os.path.join(a.out, "playground-answer.png"))
        if a.docs_screenshot:
            driver.save_screenshot(a.docs_screenshot)
            print(f"wrote {a.docs_screenshot}")

        # Raw JSON one click away; copy as curl.
        driver.find_element(By.CSS_SELECTOR, "#raw summary").click()
        check(driver.find_element(By.ID, "raw-response").is_displayed()
              and json.loads(driver.find_element(By.ID, "raw-response").text) == api,
              "one click shows the raw response, equal to the API's")
        driver.find_element(By.ID, "copy-curl").click()
        wait.until(lambda d: "curl" in d.find_element(By.ID, "status").text)
        curl = driver.find_element(By.ID, "raw-curl").text
        check(curl.startswith(f"curl -sS -i '{origin}/v1/systemone'") and "$CLEF_API_KEY" in curl
              and API_KEY not in curl, "copy as curl: this origin, $CLEF_API_KEY, not the key itself")
        if shutil.which("curl") and shutil.which("bash"):
            out = subprocess.run(["bash", "-c", curl], capture_output=True, text=True,
                                 env={**os.environ, "CLEF_API_KEY": API_KEY}, timeout=60)
            resp = out.stdout.replace("\r\n", "\n").split("\n\n", 1)[-1]
            try:
                same = json.loads(resp) == api
            except ValueError:
                same = False
            check(out.returncode == 0 and same,
                  f"the copied curl command gives the same answer ({out.returncode} {out.stdout[:300]!r} "
                  f"{out.stderr[:300]!r}; command {curl!r})")

        # Keyboard: Ctrl+Enter from the state field sends.
        n = exchanges()
        send(how="keys")
        check(exchanges() == n + 1, "Ctrl+Enter sends")

        # A 422: the choice question with no options; the message appears by that question's options.
        for b in card(1).find_elements(By.CSS_SELECTOR, "[data-role=options] .danger"):
            b.click()
        bad = json.loads(json.dumps(expected_request))
        bad["questions"]["team"]["criteria"] = {}
        s, _, b422 = http(origin + "/v1/systemone", json.dumps(bad).encode(),
                          {"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
        item = json.loads(b422)["detail"][0]
        check(s == 422 and item["loc"] == ["body", "questions", "team", "criteria"],
              f"direct API call with no options -> 422 at body.questions.team.criteria ({s} {item})")
        send()
        cerr = card(1).find_element(By.CSS_SELECTOR, "[data-role=cerror]")
        check(cerr.is_displayed() and item["msg"] in cerr.text and "team → criteria" in cerr.text,
              f"the 422 message is shown by the question's options ({cerr.text!r})")
        check("invalid" in card(1).get_attribute("class"), "the question is marked invalid")
        check(not card(0).find_element(By.CSS_SELECTOR, "[data-role=qerror]").is_displayed(),
              "the other question shows no error")
        driver.save_screenshot(os.path.join(a.out, "playground-422.png"))

        # A 422 about the state: JSON mode with invalid JSON is caught before sending; valid JSON is sent.
        driver.find_element(By.CSS_SELECTOR, "input[name=state-mode][value=json]").click()
        n = exchanges()
        driver.find_element(By.ID, "send").click()
        serr = driver.find_element(By.ID, "state-error")
        check(serr.is_displayed() and "JSON" in serr.text and exchanges() == n,
              f"invalid JSON state is shown by the state field, nothing sent ({serr.text!r})")

        # A score question (levels from the editor's defaults) next to the noul.
        driver.find_element(By.CSS_SELECTOR, "input[name=state-mode][value=text]").click()
        card(1).find_element(By.CSS_SELECTOR, "[data-role=remove]").click()
        driver.find_element(By.CSS_SELECTOR, "[data-add=score]").click()
        typed(card(1).find_element(By.CSS_SELECTOR, "[data-role=qid]"), "urgency")
        send()
        sent = json.loads(driver.execute_script("return document.getElementById('raw-request').textContent"))
        check(sent["questions"].get("urgency") == {"type": "score", "criteria": ["low", "medium", "high"]},
              f"a score question is sent with its levels ({sent['questions'].get('urgency')})")
        s2, _, b2 = http(origin + "/v1/systemone", json.dumps(sent).encode(),
                         {"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
        score = json.loads(b2)["answers"]["urgency"] if s2 == 200 else {}
        sbars = driver.execute_script("""
          return Array.from(document.querySelectorAll('#answers li.bar[data-question=urgency]')).map(b =>
            [b.dataset.option, Number(b.dataset.value), b.classList.contains('chosen')]);""")
        probs = score.get("probabilities", {})
        best = max(probs, key=probs.get) if probs else None
        check([(o, v) for o, v, _ in sbars] == list(probs.items())
              and [o for o, _, c in sbars if c] == [best],
              f"score bars = API probabilities {probs}, most likely level {best} highlighted ({sbars})")

        # Only this origin, no CSP violation, no script error.
        names = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name).concat([location.href])")
        check(all(u.startswith(origin + "/") for u in names), f"every request went to {origin} ({names})")
        stored = driver.execute_script(
            "return [localStorage.length, sessionStorage.length, document.cookie]")
        check(stored == [0, 0, ""], f"nothing stored: no localStorage, sessionStorage or cookie ({stored})")
        violations = driver.execute_script("return window.clefPlayground.cspViolations")
        check(violations == [], f"no CSP violation ({violations})")
        logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"
                and not re.search(r"status of (401|422)", e.get("message", ""))]
        check(logs == [], f"no browser errors ({logs})")

        # A phone: nothing wider than the screen.
        driver.set_window_size(390, 844)
        time.sleep(0.3)
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        check(overflow <= 0, f"at 390 px wide nothing overflows sideways ({overflow} px)")
        send()  # one column: the answer is scrolled into view
        top = driver.execute_script("return document.getElementById('answer').getBoundingClientRect().top")
        check(abs(top) < 5, f"on a phone the answer is brought into view after Send (top {top})")
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        check(overflow <= 0, f"the answer fits 390 px too ({overflow} px)")
        driver.save_screenshot(os.path.join(a.out, "playground-phone.png"))
        print(f"screenshots in {a.out}; browser round trip {browser_s:.2f} s")
    except Exception as e:  # noqa: BLE001 -- any failure is reported with the server log
        import traceback
        traceback.print_exc()
        check(False, f"exception: {e}")
    finally:
        if driver is not None:
            try:
                driver.save_screenshot(os.path.join(a.out, "playground-last.png"))
            except Exception:  # noqa: BLE001
                pass
            driver.quit()
        srv.stop()
        shutil.rmtree(profile, ignore_errors=True)
    print(f"playground browser test: {time.time() - t_start:.1f} s")
    if check.failures:
        print("server log:\n" + srv.text_log()[-4000:], file=sys.stderr)
        print(f"{len(check.failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
