"""The decision playground in headless Chromium, against the real gateway and server.

Every number the page shows is checked against a direct HTTP call made here (the reference),
never against the page's own arithmetic: the bars against `/v1/systemone`, the word answers'
token rows against the server's `/v1/score_candidates`, the hashes against hashlib over an
RFC 8785 canonical JSON written in this file.
"""

from __future__ import annotations

import decimal
import hashlib
import json
from typing import Any

import httpx
import pytest

from .conftest import KEY

SYSTEM = "You sort messages for an online shoe shop."
USER = "My parcel never arrived. The tracking page has said 'pending' for nine days. Where is it?"
OPTIONS = {"billing": "Payments or refunds", "shipping": "Delivery or tracking", "returns": None}
OPTION_LINES = "billing: Payments or refunds\nshipping: Delivery or tracking\nreturns"
STATE = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
QUESTION = "What is the message about?"

READY = "body[data-ready=true]"
SETTLED = """() => !document.querySelector('#decide').disabled &&
  (document.querySelector('#decision-status').textContent === 'Done.' ||
   !document.querySelector('#decision-error').hidden)"""
FOCUSABLE = """() => Array.from(document.querySelectorAll(
    'a[href], button, input, select, textarea, summary, [tabindex]'))
  .filter(e => !e.disabled && e.tabIndex >= 0 && e.getClientRects().length > 0)
  .map(e => e.id)"""


# ---------------------------------------------------------------- references


def js_number(value: float) -> str:
    """ECMAScript's Number::toString (what JSON.stringify writes), from Python's shortest repr."""
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    sign = "-" if value < 0 else ""
    _, digits, exponent = decimal.Decimal(repr(abs(value))).normalize().as_tuple()
    s = "".join(map(str, digits))
    k, n = len(s), int(exponent) + len(s)
    if k <= n <= 21:
        return sign + s + "0" * (n - k)
    if 0 < n <= 21:
        return f"{sign}{s[:n]}.{s[n:]}"
    if -6 < n <= 0:
        return f"{sign}0.{'0' * -n}{s}"
    e = n - 1
    mantissa = s if k == 1 else f"{s[0]}.{s[1:]}"
    return f"{sign}{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def jcs(value: Any) -> str:
    """RFC 8785 canonical JSON: keys in UTF-16 code-unit order, ECMAScript number text."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        return js_number(float(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(jcs(v) for v in value) + "]"
    keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
    return "{" + ",".join(f"{jcs(k)}:{jcs(value[k])}" for k in keys) + "}"


def reply_hash(reply: dict[str, Any]) -> str:
    """The documented hash: model and answers, without the x_trace / x_parity extras."""
    answers = {
        qid: {k: v for k, v in answer.items() if k not in ("x_trace", "x_parity")}
        for qid, answer in reply["answers"].items()
    }
    text = jcs({"model": reply["model"], "answers": answers})
    return hashlib.sha256(text.encode()).hexdigest()


def body(question: dict[str, Any], **extensions: Any) -> dict[str, Any]:
    return {"model": "jev-latest", "state": STATE, "questions": {"q": question}, **extensions}


def choice(**extra: Any) -> dict[str, Any]:
    return {"type": "choice", "instructions": QUESTION, "criteria": OPTIONS, **extra}


def systemone(url: str, request: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/v1/systemone", json=request, headers=headers, timeout=600)


# ---------------------------------------------------------------- page helpers


def open_page(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector(READY)


def fill(page: Any, kind: str = "choice", options: str = OPTION_LINES) -> None:
    page.fill("#system", SYSTEM)
    page.fill("#user", USER)
    page.select_option("#qtype", kind)
    page.fill("#instructions", QUESTION)
    page.fill("#options", options)


def press(page: Any, button: str) -> None:
    page.click(button)
    page.wait_for_function(SETTLED)


def bars(page: Any, list_id: str = "#bars") -> dict[str, float]:
    rows = page.query_selector_all(f"{list_id} li")
    return {row.get_attribute("data-option"): float(row.get_attribute("data-probability")) for row in rows}


def error_text(page: Any) -> str:
    assert page.is_visible("#decision-error"), "the page shows no error"
    return page.inner_text("#decision-error")


# ---------------------------------------------------------------- tests


def test_page_loads_without_console_errors(page: Any, gateway: str):
    response = page.goto(gateway)
    page.wait_for_selector(READY)
    assert response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert page.title() == "Strata decision playground"
    fill(page)
    press(page, "#decide")
    assert not page.is_visible("#decision-error")
    assert page.errors == []


def test_bars_show_exactly_the_probabilities_of_the_api(page: Any, gateway: str):
    open_page(page, gateway)
    fill(page)
    press(page, "#decide")
    assert json.loads(page.text_content("#request-json")) == body(choice(), x_strata={"trace": True})

    reference = systemone(gateway, body(choice())).json()["answers"]["q"]
    assert bars(page) == reference["probabilities"]  # exact floats, the page's trace extras change nothing
    assert page.inner_text("#answer") == reference["choice"]
    assert page.inner_text("#confidence") == f"{reference['confidence']:.4f}"
    assert page.inner_text("#label-mass") == f"{reference['x_label_mass']:.4g}"
    # each bar is drawn as long as its probability
    for row in page.query_selector_all("#bars li"):
        track = row.query_selector(".bar-track").bounding_box()
        fill_box = row.query_selector(".bar-fill").bounding_box()
        assert fill_box["width"] / track["width"] == pytest.approx(
            float(row.get_attribute("data-probability")), abs=0.01
        )
    # the prompt shown is the one the server read, with the cached and shared parts marked
    trace = systemone(gateway, body(choice(), x_strata={"trace": True})).json()["answers"]["q"]["x_trace"][
        "prompt"
    ]
    assert page.inner_text("#prompt-text") == trace["text"]
    underlined = "".join(e.text_content() for e in page.query_selector_all("#prompt-text .in-state"))
    assert underlined == trace["shared_prefix_text"]
    cached = "".join(e.text_content() for e in page.query_selector_all("#prompt-text mark"))
    assert trace["text"].startswith(cached)
    stats = page.inner_text("#prompt-stats")
    assert (cached != "") == (not stats.split("; ")[1].startswith("0 read")), stats
    assert f"{trace['tokens']} tokens" in page.inner_text("#prompt-stats")


def test_word_answers_show_each_options_tokens(page: Any, gateway: str, server_url: str):
    open_page(page, gateway)
    fill(page, "text")
    press(page, "#decide")
    assert page.is_visible("#candidates")

    reply = systemone(gateway, body(choice(x_answers="text"), x_strata={"trace": True})).json()["answers"][
        "q"
    ]
    assert bars(page) == reply["probabilities"]
    trace = reply["x_trace"]
    scored = httpx.post(
        f"{server_url}/v1/score_candidates",
        json={"prompt": trace["prompt"]["token_ids"], "candidates": trace["candidates"]},
        timeout=600,
    ).json()["candidates"]
    tables = page.query_selector_all("#candidate-tables .candidate")
    assert [t.get_attribute("data-option") for t in tables] == list(OPTIONS)
    for table, expected in zip(tables, scored, strict=True):
        rows = table.query_selector_all("tbody tr")
        assert [json.loads(r.query_selector("td").inner_text()) for r in rows] == expected["tokens"]
        shown = [float(r.query_selector("td.num").inner_text()) for r in rows]
        assert shown == [round(v, 4) for v in expected["token_logprobs"]]
        totals = [float(c.inner_text()) for c in table.query_selector_all("tfoot td")]
        assert totals == [
            round(expected["logprob"], 4),
            round(expected["normalized_logprob"], 4),
            round(expected["probability"], 4),
        ]


def test_repeat_shows_two_equal_hashes(page: Any, gateway: str):
    open_page(page, gateway)
    fill(page)
    press(page, "#decide")
    press(page, "#repeat")
    first, again = page.inner_text("#hash-first"), page.inner_text("#hash-repeat")
    assert first == again == reply_hash(systemone(gateway, body(choice())).json())
    assert page.inner_text("#hash-verdict") == "equal"
    fingerprint = page.inner_text("#fingerprint")
    served = systemone(gateway, body(choice(), x_strata={"trace": True})).json()["x_system_fingerprint"]
    if served is not None:
        assert fingerprint == served
    else:  # a server without system_fingerprint: its model and kernels from /health instead
        health = httpx.get(f"{gateway}/upstream/health").json()
        assert health["model"] in fingerprint and health["kernels"] in fingerprint


def test_the_hash_pieces_match_independent_implementations(page: Any, gateway: str):
    open_page(page, gateway)
    tricky = {
        "é": [1e-7, 1e21, 0.1, 123.0, -2.5e-5, 1.7976931348623157e308, 5e-324],
        "a": {"z": None, "B": True, "\U0001f600": 'line\nbreak "quoted" \u0001'},
        "\uff41": 0.30000000000000004,
    }
    assert page.evaluate("v => window.strataPlayground.canonical(v)", tricky) == jcs(tricky)
    for text in ["", "a", "x" * 55, "x" * 56, "x" * 64, "y" * 119, "日本語 é \U0001f600" * 40]:
        expected = hashlib.sha256(text.encode()).hexdigest()
        plain = page.evaluate("t => window.strataPlayground.sha256Plain(new TextEncoder().encode(t))", text)
        assert plain == expected
        assert page.evaluate("t => window.strataPlayground.sha256Hex(t)", text) == expected


def test_an_invalid_request_shows_the_servers_message(page: Any, gateway: str):
    open_page(page, gateway)
    fill(page)
    press(page, "#decide")
    assert page.is_visible("#result")
    page.fill("#options", "")
    press(page, "#decide")
    refusal = systemone(gateway, body({"type": "choice", "instructions": QUESTION, "criteria": {}}))
    assert refusal.status_code == 422
    shown = error_text(page)
    assert "HTTP 422" in shown
    assert refusal.json()["detail"][0]["msg"] in shown
    assert page.is_hidden("#result")


def test_rotations_and_parity_on_demand(page: Any, gateway: str):
    open_page(page, gateway)
    fill(page)
    press(page, "#decide")
    press(page, "#rotations")
    averaged = systemone(gateway, body(choice(), x_strata={"rotations": True})).json()["answers"]["q"][
        "probabilities"
    ]
    cells = page.query_selector_all("#rotation-table tbody tr")
    assert [c.query_selector("th").inner_text() for c in cells] == list(OPTIONS)
    assert [float(c.query_selector_all("td")[1].inner_text()) for c in cells] == [
        round(averaged[name], 4) for name in OPTIONS
    ]
    press(page, "#parity")
    parity = systemone(gateway, body(choice(), x_strata={"parity": True})).json()["answers"]["q"]["x_parity"]
    assert parity["max_abs_diff"] == 0.0 and parity["argmax_agrees"] is True
    assert "Parity holds." in page.inner_text("#parity-text")


def test_structured_output_tab(page: Any, gateway: str, server_url: str):
    open_page(page, gateway)
    page.fill("#system", SYSTEM)
    page.fill("#user", USER)
    page.click("#tab-structured")
    page.click("#run-structured")
    page.wait_for_function("() => document.querySelector('#structured-status').textContent === 'Done.'")
    schema = json.loads(page.input_value("#schema"))
    answer = json.loads(page.inner_text("#structured-answer"))
    assert answer["topic"] in schema["properties"]["topic"]["enum"] and isinstance(answer["urgent"], bool)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    prompt = httpx.post(f"{server_url}/tokenize", json={"messages": messages}).json()["tokens"]
    answers = httpx.post(
        f"{server_url}/v1/score_candidates", json={"prompt": prompt, "json_schema": schema}, timeout=600
    ).json()["candidates"]
    assert bars(page, "#answer-set") == {c["text"]: c["probability"] for c in answers}
    rows = page.query_selector_all("#structured-tokens tbody tr")
    assert "".join(json.loads(r.query_selector("td").inner_text()) for r in rows) == page.inner_text(
        "#structured-answer"
    )


def test_a_schema_without_a_finite_answer_set_says_why(page: Any, gateway: str):
    open_page(page, gateway)
    page.click("#tab-structured")
    page.fill(
        "#schema", '{"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}'
    )
    page.fill("#max-tokens", "12")
    page.click("#run-structured")
    page.wait_for_function("() => document.querySelector('#structured-status').textContent === 'Done.'")
    assert "no finite answer set" in page.inner_text("#answer-set-note")
    assert page.query_selector_all("#answer-set li") == []


def test_keyboard_alone_reaches_every_control(page: Any, gateway: str):
    open_page(page, gateway)
    fill(page)
    page.evaluate("() => document.activeElement.blur()")
    for _ in range(40):  # Tab to the Decide button, then Enter
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.id") == "decide":
            break
    page.keyboard.press("Enter")
    page.wait_for_function(SETTLED)
    assert page.is_visible("#result")

    def tab_cycle() -> list[str]:
        """Tab twice round the page; from the first control on, focus must visit every
        control once, in reading order, before it comes back to the first."""
        expected = page.evaluate(FOCUSABLE)
        assert all(expected), "every focusable control has an id"
        visited = []
        for _ in range(2 * len(expected) + 4):
            page.keyboard.press("Tab")
            visited.append(page.evaluate("() => document.activeElement.id"))
        visited = [v for v in visited if v]  # the browser's own chrome between rounds
        start = visited.index(expected[0])
        assert visited[start : start + len(expected)] == expected
        return expected

    decision = tab_cycle()
    assert {"api-key", "save-key", "forget-key", "system", "user", "tab-decision", "qtype"} <= set(decision)
    assert {"instructions", "options", "decide", "repeat", "rotations", "parity", "prompt-text"} <= set(
        decision
    )
    page.focus("#tab-decision")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("() => document.activeElement.id") == "tab-structured"
    assert page.is_visible("#panel-structured") and page.is_hidden("#panel-decision")
    structured = tab_cycle()
    assert {"tab-structured", "schema", "max-tokens", "run-structured"} <= set(structured)
    assert "decide" not in structured


def test_a_key_is_kept_for_the_tab_only_and_a_wrong_key_shows_the_401(page: Any, keyed_gateway: str):
    open_page(page, keyed_gateway)
    fill(page)
    refusal = systemone(keyed_gateway, body(choice()), key="wrong")
    assert refusal.status_code == 401
    page.fill("#api-key", "wrong")
    page.click("#save-key")
    press(page, "#decide")
    assert refusal.json()["detail"]["message"] in error_text(page)
    assert "HTTP 401" in error_text(page)

    page.fill("#api-key", KEY)
    page.click("#save-key")
    assert page.input_value("#api-key") == ""
    press(page, "#decide")
    assert page.is_hidden("#decision-error")
    assert (
        bars(page)
        == systemone(keyed_gateway, body(choice()), key=KEY).json()["answers"]["q"]["probabilities"]
    )
    stored = page.evaluate("() => [Object.values(sessionStorage), Object.keys(localStorage).length]")
    assert stored == [[KEY], 0]
    page.click("#forget-key")
    assert page.evaluate("() => sessionStorage.length") == 0


def test_screenshots_desktop_and_narrow(page: Any, gateway: str, artifacts: Any):
    open_page(page, gateway)
    fill(page)
    press(page, "#decide")
    press(page, "#repeat")
    press(page, "#parity")
    page.screenshot(path=str(artifacts / "desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    # narrow: nothing wider than the screen, so no sideways scrolling
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1]
    page.screenshot(path=str(artifacts / "narrow.png"), full_page=True)
    assert (artifacts / "desktop.png").stat().st_size > 10_000
    assert (artifacts / "narrow.png").stat().st_size > 10_000


CONTRAST = """() => {
  const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map((v) => {
    v /= 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  }).reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const background = (e) => {
    for (; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length < 4 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const low = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const e = node.parentElement;
    if (!node.textContent.trim() || !e.getClientRects().length || e.closest('[hidden], :disabled')) continue;
    const [a, b] = [lum(rgb(getComputedStyle(e).color).slice(0, 3)), lum(background(e))];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) low.push(`${e.tagName}#${e.id}.${e.className}: ${ratio.toFixed(2)}`);
  }
  return low;
}"""
UNLABELLED = """() => Array.from(document.querySelectorAll('input, select, textarea'))
  .filter((e) => e.labels.length === 0 && !e.getAttribute('aria-label')).map((e) => e.id)"""


def test_every_field_is_labelled_and_all_text_has_contrast(page: Any, gateway: str):
    open_page(page, gateway)
    fill(page)
    press(page, "#decide")
    press(page, "#parity")
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(CONTRAST) == []  # WCAG AA: at least 4.5:1 for every visible text
    page.click("#tab-structured")
    assert page.evaluate(CONTRAST) == []
