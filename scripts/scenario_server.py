#!/usr/bin/env python3
"""Offline fake LLM server for mia's tests, benchmarks and demo.

    python3 scripts/scenario_server.py [--port N] [--host 127.0.0.1] [--log-sends FILE]
    python3 scripts/scenario_server.py --fork

Prints one stdout line, ``LISTENING <port>`` (default port 0 = ephemeral),
then serves until SIGTERM/SIGINT and exits 0.  Loopback hosts only; nothing
else goes to stdout.  ``--log-sends FILE`` appends ``<request_seq>
<token_index> <time.monotonic_ns()>`` per token event (reasoning and text
tokens, numbered from 0 in stream order) once its write/drain returned,
flushed before each response ends.

``--fork`` starts servers for a test run without starting Python each time
(importing asyncio alone takes ~0.1 s of CPU, and the tests start ~600
servers): it reads one JSON list of arguments per stdin line, forks a
server with them, and answers ``<pid> LISTENING <port>``, or ``ERROR
<reason>`` when the server did not start.  Each server is its own process,
with its own state, ended by SIGTERM to its pid as usual.  At the end of
stdin it ends the servers still running, then exits.

HTTP/1.1, keep-alive (``Connection: close`` honoured), request bodies by
Content-Length only (chunked ones get 411).  Six wire formats:
    POST /v1/chat/completions         OpenAI Chat Completions, "stream" true/false
    POST /v1/responses                OpenAI Responses, "stream" true/false
    POST /v1/messages                 Anthropic Messages, "stream" true/false
    POST /v1beta/models/M:streamGenerateContent?alt=sse
                                      Gemini, SSE stream (400 without alt=sse)
    POST /v1beta/models/M:generateContent
                                      Gemini, one JSON response
    POST /api/chat                    Ollama's native chat, NDJSON stream unless
                                      "stream" is false
    POST /v1/messages/count_tokens    Anthropic's token count: {"input_tokens": n}
    POST /v1beta/models/M:countTokens Gemini's token count of {"generateContentRequest":
                                      {...}} or {"contents": [...]}: {"totalTokens": n}
    GET  /v1/models                   Anthropic's list shape when the request has
                                      an anthropic-version or x-api-key header,
                                      else OpenAI's {"object":"list","data":[...]}
    GET  /v1beta/models               Gemini's {"models":[{"name":"models/<id>",...}]}
    POST /openai/deployments/D/chat/completions?api-version=V
                                      Azure OpenAI: OpenAI's format for deployment D,
                                      streams opening with Azure's prompt-filter
                                      chunk (no choices)
    GET  /openai/models?api-version=V Azure OpenAI's model list (OpenAI's shape);
                                      both answer 404 "Resource not found" without
                                      an api-version, as Azure does
    GET  /api/tags                    Ollama's {"models":[{"name":"<name:tag>",...}]}
    GET  /_requests                   requests so far: seq, conn (the number of
                                      the TCP connection it came on, from 1),
                                      method, path (the
                                      whole target), query, JSON body or null,
                                      headers (authorization, x-api-key,
                                      x-goog-api-key, api-key values -> "<redacted>"); a
                                      "key" query parameter is redacted too and
                                      marks the record "key_in_url": true
    DELETE /_requests                 clears that list and the attempt counters
    anything else                     404 (Gemini's error shape under /v1beta,
                                      Ollama's under /api, else OpenAI's)
/_requests calls are neither recorded nor counted; every other request takes
the next ``seq`` (1, 2, ...), which also names replies: ``chatcmpl-scn<seq>``,
``msg_scn<seq>``, Gemini responseId ``scn<seq>``.

SCENARIOS.  When the conversation's LAST message is a tool result (OpenAI:
trailing role "tool" messages; Anthropic: a user message with tool_result
blocks; Gemini: a user/function content with functionResponse parts) the
answer is the text ``tool said: <result>`` (several results joined with
" | "; Gemini's result is the JSON of its "response" object; Ollama: trailing
role "tool" messages, as OpenAI).  Otherwise the
scenario is the first word of the LAST user message's text (OpenAI text
parts / Anthropic string or text blocks / Gemini text parts, concatenated;
Ollama's string content);
bad arguments fall back to echo.  Agent harnesses wrap the user's words:
Claude Code (claude-agent-acp) sends the prompt as the last of several text
blocks, the others being markup such as <system-reminder>...</system-reminder>
or <command-name>...</command-name>.  So, for choosing the scenario (and for
echo), ``<system-reminder>`` elements are cut out of every text piece and a
piece that is then only such <tag>...</tag> elements is skipped; if nothing
is left, the plain concatenation is used.  After a cancelled turn Claude
Code sends the cut-off prompt, a "[Request interrupted by user]" piece and
the new prompt in one message: pieces up to that marker are skipped too.
Word tokens are ``"w%05d " % i``,
reasoning tokens ``"r%05d " % i`` (i = 0, 1, ...).  Same names everywhere:
  echo <anything>  (and any other text) the whole unstripped user text, split
                   after each word's trailing whitespace:
                   "Hello big world" -> "Hello ", "big ", "world".
  long N           N word tokens as fast as possible (batched writes).
  slow N RATE      N word tokens, token i sent at start + i/RATE seconds.
  reply RATE JSON  the JSON string after RATE as the answer (text after the
                   JSON is ignored), each line cut in two tokens, RATE tokens
                   a second (0: as fast as possible).
  replystall K JSON  the first K tokens of that answer, then silence until
                   the client leaves.
  unicode          "héllo wörld — 你好世界 🎉🚀 naïve café ∑∫" (precomposed
                   é ö ï, U+2014, U+1F389 U+1F680) in tokens of 1, 2, 3, 1, 2,
                   3, ... characters; after the opening events the SSE body
                   goes out in 3-byte HTTP chunks, each drained with a ~2 ms
                   pause, splitting UTF-8 sequences, JSON and "data:" prefixes.
  http STATUS [m]  status 400-599 with the format's error body (tables below);
                   words after STATUS replace the message.  429 carries
                   "retry-after: 1" (Gemini: RetryInfo "1s" instead).
  needkey KEY      401 (the format's auth error, "Incorrect API key provided.")
                   unless the request's credential is KEY, then "ok".  For
                   key re-reading tests.
  badkey [masked]  401 (the format's auth error) whose message echoes the
                   request's credential (Bearer token, x-api-key or
                   x-goog-api-key): "Incorrect API key provided: <key>.";
                   with "masked" the key is shown the way OpenAI masks it:
                   its first 8 and last 4 characters around 20 "*".
  reset N          N word tokens, then a TCP reset (SO_LINGER 0, close).
  stall N          N word tokens, then silence until the client leaves.
  truncate N       N word tokens, then the 0-size chunk: nothing after the
                   tokens (no finish/[DONE]; no content_block_stop, message_delta
                   or message_stop; no finishReason chunk).
  malformed        token "ok ", a broken event (the format's token event cut
                   after its text key, then a blank line), token "after", then
                   a normal finish.
  count            one token: this request's seq, as decimal text.
  reason N         N reasoning tokens, then the text "done" (usage reports the
                   reasoning where the format has a field for it).
  tool NAME JSON   a call of tool NAME with the JSON object after NAME (none:
                   {}); its compact JSON is cut into 3 pieces for streaming
                   (Ollama streams calls whole).
  tools2           two calls: read_file {"path":"a.txt"}, read_file {"path":"b.txt"}.
  custom NAME TEXT a call of the freeform (custom) tool NAME whose input is
                   TEXT, a JSON string ("*** Begin Patch\n..."): Responses
                   sends a custom_tool_call item (Codex's apply_patch); the
                   other formats a function call with {"input": TEXT}.
  texttool NAME JSON  a model without native tools: the text "Calling NAME. "
                   then <tool_call>{"name": NAME, "arguments": JSON}</tool_call>
                   (the tag itself split across two tokens), finishing "stop".
  retry429 N [S]   attempts are counted per (format, exact user text); the
                   first N get 429 (OpenAI "retry-after: S" and
                   "retry-after-ms: S*1000"; Anthropic "retry-after: S";
                   Gemini RetryInfo retryDelay "Ss", no header); later ones
                   answer "ok after N".  S defaults to 1, decimals allowed.
  fail5xx N [ST]   the same counting; the first N get status ST (500-599,
                   default 502), then "ok after N".
  noretry N        the same counting; the first N get 503 with
                   "x-should-retry: false", then "ok after N".
  overloaded N     the same counting; the first N streams answer 200 and then
                   fail in-band (below; non-streaming: the format's overloaded
                   HTTP error: OpenAI 503, Anthropic 529, Gemini 503), then
                   "ok after N".
  failafter N      N word tokens, then the format's in-band failure (the
                   overloaded one, without Anthropic's opening events, which
                   were sent); non-streaming: the overloaded HTTP error.
  context          400: the format's context-window-exceeded error.
  filtered         one word token, then a content-filter finish.
  filtered400      400 refusing the prompt as OpenAI and Azure do: the message
                   names no filter, error.code "content_filter" does (other
                   formats: their usual 400 with that message).
  nousage          echo, without usage (OpenAI: no usage chunk or field;
                   Anthropic: all usage numbers 0; Gemini: no usageMetadata).
  ratelimited-window S
                   the answer "ok" with headers saying the request window is
                   used up for S seconds (default 60); none for Gemini.
  window-reset V   the answer "ok" with headers saying the request window is
                   used up and resets at V, sent verbatim (OpenAI
                   x-ratelimit-reset-requests: V, e.g. "1000h"; Anthropic
                   anthropic-ratelimit-requests-reset: V, e.g. an RFC 3339
                   time); none for Gemini.  For hostile-server tests.
  retry429-raw N V like retry429 N, but the 429 carries V verbatim: OpenAI and
                   Anthropic "retry-after: V" (no retry-after-ms), Gemini
                   RetryInfo retryDelay "V".  For hostile-server tests.
  sameids SCENARIO SCENARIO (the words after "sameids") with OpenAI tool call
                   ids "call_<k>" in every answer, as servers that number the
                   calls of each answer do (ids reused across turns).
  split SCENARIO   SCENARIO (the words after "split"), its response body
                   written in pseudo-random 1-16 byte pieces (seeded by seq;
                   each its own HTTP chunk when chunked), each drained (this
                   replaces unicode's 3-byte trickle); echo still echoes the
                   whole user text.
  hugeline MB [FRAMING]
                   streaming: the opening events, then ONE token event whose
                   text is MB MiB of "x" (MB may be a decimal), written in
                   64 KiB pieces (each its own HTTP chunk, each drained, so a
                   client that stops reading is noticed), then the normal
                   finish.  FRAMING: sse (the default, but ndjson for
                   Ollama), ndjson (Content-Type application/x-ndjson, one
                   JSON line per event) or array (Content-Type
                   application/json, the events as one JSON array); ndjson
                   and array drop Anthropic's event: names.
                   Non-streaming: the same text in one reply.
  window LIMIT SECS [MS]
                   a fixed request window shared by every "window" request of
                   the format: LIMIT requests per SECS seconds, starting at
                   the first.  Within it: "ok" with headers telling what is
                   left (OpenAI x-ratelimit-{limit,remaining,reset}-requests,
                   reset a duration "2.5s"; Anthropic
                   anthropic-ratelimit-requests-*, reset RFC 3339; Gemini and
                   Ollama, which have none of their own, the generic x-ratelimit-{limit,
                   remaining,reset}, reset in seconds).  Past it: 429 with
                   retry-after (seconds to the reset).  With MS, every answer
                   (429 or not) leaves MS milliseconds after the request was
                   counted, as over a slow network.  For pacing tests.
  lateheaders MS   every attempt waits MS milliseconds before the response
                   headers, then answers "ok".  For timeout-retry tests.
  gateway WHERE V  the answer "ok" carrying an LLM gateway's cost of the call
                   (LiteLLM's shapes): WHERE header sends the response header
                   "x-litellm-response-cost: V" verbatim; WHERE usage puts
                   V in the usage object's "cost" (the last chunk when
                   streaming; V as JSON when it parses, else as a string;
                   OpenAI format only); WHERE both does both.  For
                   gateway-cost tests, hostile values included.
  ctype TYPE       streaming: "ok", sent as SSE but labelled Content-Type
                   TYPE (e.g. text/html).  For the unknown-framing test.
  cached N         the answer "ok" whose usage says N more prompt tokens
                   were read from the provider's cache (OpenAI: N added to
                   prompt_tokens and given as prompt_tokens_details.
                   cached_tokens; Anthropic: cache_read_input_tokens N;
                   other formats: no cache field, as echo).  For pricing tests.
Non-streaming requests get the same content in one reply (reset and stall
misbehave the same way; truncate, malformed, unicode answer normally).
"Output tokens" are reasoning + text tokens + 3 per tool call; prompt tokens
count whitespace-split words of every message (and system text).  With
``--prompt-tokens pieces`` they are counted by a tokenizer-like rule instead,
over everything the model reads: the system text, every message's text, tool
calls (name and JSON arguments), tool results, and each offered tool's name,
description and JSON schema.  A piece is a non-ASCII character, a run of up
to 8 ASCII letters, up to 3 digits, or up to 2 other ASCII non-space
characters (PIECE below); whitespace counts nothing.  The counting endpoints
answer with the same count the usage of that request would report.

OPENAI.  A stream: role chunk (delta {"role":"assistant","content":""}), one
chunk per token (delta {"reasoning_content":...} for reasoning, then
{"content":...}), tool calls as delta.tool_calls: per call a delta {index, id
"call_scn<seq>_<k>", type "function", function {name, arguments ""}}, then
three {index, function {arguments piece}} deltas (with two calls these
interleave: 0, 1, 0, 1, 0, 1), the finish chunk (delta {}, finish_reason
stop / tool_calls / content_filter), the usage chunk (choices []) if
stream_options.include_usage, ``data: [DONE]``; each SSE event is its own
HTTP chunk.  usage {prompt_tokens, completion_tokens, total_tokens, and
completion_tokens_details.reasoning_tokens after reasoning}.  Errors
{"error":{message,type,param,code}}: 401 invalid_request_error/
invalid_api_key, 404 invalid_request_error/model_not_found, 429 requests/
rate_limit_exceeded, 500 server_error, others api_error.  In-band overload:
``data: {"error":{"message":"Overloaded","type":"server_error"}}`` then the
end.  Window headers: x-ratelimit-limit-requests, x-ratelimit-remaining-
requests: 0, x-ratelimit-reset-requests: "<S>s".

ANTHROPIC.  Events ``event: <type>\\ndata: <json>\\n\\n``: message_start
(message id msg_scn<seq>, usage {input_tokens, output_tokens 1,
cache_creation_input_tokens 0, cache_read_input_tokens 0 or cached's N}), ping, then per
content block content_block_start, content_block_delta(s), content_block_stop:
a thinking block (thinking_delta per reasoning token, then signature_delta
"sig-scn<seq>"), a text block (text_delta per token), tool_use blocks (id
toolu_scn<seq>_<k>, input {} at the start, then three input_json_delta
pieces); then message_delta (delta.stop_reason end_turn / tool_use / refusal,
usage.output_tokens cumulative), message_stop.  Non-streaming: a "message"
object with the same blocks.  Errors {"type":"error","error":{type,message}}:
401 authentication_error "invalid x-api-key", 404 not_found_error "model:
<model>", 429 rate_limit_error, 500 api_error, 529 overloaded_error
"Overloaded", other 4xx invalid_request_error, 5xx api_error.  In-band
overload: message_start, ping, ``event: error`` with overloaded_error, end.
Window headers: anthropic-ratelimit-requests-limit, -remaining: 0, -reset:
RFC 3339 UTC time (now + S, rounded up to the second).

GEMINI.  Each chunk ``data: <GenerateContentResponse>\\n\\n`` (no [DONE]):
{"candidates":[{"content":{"parts":[...],"role":"model"},"index":0}],
"modelVersion":<model>,"responseId":"scn<seq>"}, one part per chunk: {"text":
token, "thought": true} for reasoning, {"text": token}; the final chunk
has the functionCall parts ({"functionCall":{name,args}}) or an empty text
part, finishReason STOP and usageMetadata {promptTokenCount,
candidatesTokenCount, totalTokenCount, thoughtsTokenCount after reasoning}.
A filtered answer's final chunk has no content, finishReason SAFETY and
safetyRatings.  Errors {"error":{code,message,status}}: 400
INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND,
429 RESOURCE_EXHAUSTED with details [{"@type":
"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"<S>s"}], 500
INTERNAL, 503 UNAVAILABLE (other 4xx FAILED_PRECONDITION, 5xx UNAVAILABLE).
In-band overload: ``data: {"error":{"code":503,"message":"The model is
overloaded.","status":"UNAVAILABLE"}}`` then the end.

OLLAMA.  Content-Type application/x-ndjson, one object per line (each its
own HTTP chunk), no opening events: {"model", "created_at", "message":
{"role":"assistant","content":token}, "done": false} per token (reasoning:
content "" and "thinking": token), then one line with every tool call
({"function":{name, arguments: the JSON object}}, no ids), then the closing
line: message content "", "done_reason": "stop" (after tool calls too;
Ollama has no content filter, so filtered ends with "stop" as well), "done":
true, total_duration and load_duration, and unless nousage
prompt_eval_count, prompt_eval_duration, eval_count, eval_duration
(nanoseconds: 1 ms per prompt token, 10 ms per output token).  truncate
leaves the closing line out.  Non-streaming: one object, the whole message
(content, thinking, tool_calls) and the closing fields.  Errors {"error":
"text"}: 401 "unauthorized", 404 'model "<model>" not found, try pulling it
first', 429 (with retry-after), 500 "an error was encountered while running
the model", 503 "server busy, please try again.  maximum pending requests
exceeded"; context: 400 "input length exceeds maximum context length".
In-band overload: ``{"error":"an error was encountered while running the
model: unexpected EOF"}`` then the end.  No window headers of its own.

RESPONSES (OpenAI's Responses API).  Events ``event: <type>\ndata: <json>``
as OpenAI sends them, each with its "sequence_number" (0, 1, ...):
response.created and response.in_progress (the response object, id
resp_scn<seq>, status in_progress, output [], usage null); then the output
items, each opened by response.output_item.added and closed by
response.output_item.done (the whole item): first a reasoning item (id
rs_scn<seq>; gpt-5 sends one on every answer) whose "encrypted_content"
is "gAAAA-scn<seq>" when "include" lists "reasoning.encrypted_content";
reasoning tokens go out as response.reasoning_summary_text.delta between
response.reasoning_summary_part.added and .done (the item's "summary" then
holds one summary_text); then a message item (id msg_scn<seq>) when there
is text: response.content_part.added, one response.output_text.delta per
token, response.output_text.done, response.content_part.done; then per tool
call a function_call item (id fc_scn<seq>_<k>, call_id call_scn<seq>_<k>,
arguments "" when added) with three response.function_call_arguments.delta
pieces and response.function_call_arguments.done.  The end is
response.completed (status completed; filtered: response.incomplete with
incomplete_details.reason content_filter) with every item in "output" and
usage {input_tokens, input_tokens_details.cached_tokens, output_tokens,
output_tokens_details.reasoning_tokens, total_tokens}; cached_tokens are the
prompt tokens of "instructions", as if that stable prefix were always in
the cache.  Requests: "input" is a string or a list of items (messages with
string content or input_text/output_text/input_image parts, function_call,
function_call_output, reasoning); the scenario comes from the last user
message, and trailing function_call_output items (any *_call_output, e.g.
Codex's custom_tool_call_output) are the tool results.
Stateless use is checked: a reasoning item sent back must carry the
encrypted_content this server issued (else 400 invalid_encrypted_content,
or 404 "Item with id ... not found" when it has none and "store" is
false), and with "store": false and encrypted reasoning included, each of
this server's function_call items sent back must follow its response's
reasoning item (else 400; the server's own check that a stateless client
keeps its reasoning).  Errors are OpenAI's (above).  In-band failure:
``event: error`` (data {"type":"error","sequence_number":n,"error":{"type":
"server_error","code":"server_error","message":"Overloaded","param":null}})
then response.failed (status failed, error {code, message}); the overloaded
stream opens with response.created and response.in_progress.
"""
import argparse
import asyncio
import fcntl
import itertools
import json
import math
import os
import random
import re
import signal
import socket
import struct
import sys
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, unquote_plus

UNICODE_TEXT = ("h\u00e9llo w\u00f6rld \u2014 \u4f60\u597d\u4e16\u754c "
                "\U0001f389\U0001f680 na\u00efve caf\u00e9 \u2211\u222b")
UNICODE_TOKENS = []  # consecutive slices of 1, 2, 3, 1, 2, 3, ... characters
while (_at := sum(map(len, UNICODE_TOKENS))) < len(UNICODE_TEXT):
    UNICODE_TOKENS.append(UNICODE_TEXT[_at:_at + 1 + len(UNICODE_TOKENS) % 3])
MODELS = ["echo", "mia-scenario", "gpt-4o-mini", "gpt-4o"]
ANTHROPIC_MODELS = [("echo", "Echo"), ("mia-scenario", "Mia Scenario"),
                    ("claude-sonnet-4-5", "Claude Sonnet 4.5"),
                    ("claude-haiku-4-5", "Claude Haiku 4.5")]
GEMINI_MODELS = [("echo", "Echo"), ("mia-scenario", "Mia Scenario"),
                 ("gemini-2.5-flash", "Gemini 2.5 Flash"),
                 ("gemini-2.5-pro", "Gemini 2.5 Pro")]
OLLAMA_MODELS = ["echo:latest", "mia-scenario:latest", "llama3.2:latest", "qwen3:8b"]
SECRET_HEADERS = {"authorization", "x-api-key", "x-goog-api-key", "api-key"}
BATCH = 512           # token events per write in fast scenarios
MAX_BODY = 64 << 20
PHRASES = {s.value: s.phrase for s in HTTPStatus}
GEMINI_COUNT = re.compile(r"/v1beta/models/([^/:]+):countTokens")
AZURE_PATH = re.compile(r"/openai/deployments/([^/]+)/chat/completions")
GEMINI_PATH = re.compile(r"/v1beta/models/([^/:]+):(generateContent|streamGenerateContent)")
MARK = "\x00token\x00"  # stands in for a token while pre-rendering an event
SEQ_MARK = "\x00seq\x00"  # stands in for a Responses event's sequence_number
ENCRYPTED = re.compile(r"gAAAA-scn([0-9]+)")  # the encrypted reasoning we issue
OUR_CALL = re.compile(r"call_scn([0-9]+)_[0-9]+")
HUGE_MARK = "\x00huge\x00"  # stands in for the hugeline token
HUGE_PIECE = 64 << 10
PIECE = re.compile(r"[^\x00-\x7f]|[A-Za-z]{1,8}|[0-9]{1,3}|[!-/:-@\[-`{-~]{1,2}")
PROMPT_TOKENS = "words"  # or "pieces" (--prompt-tokens)
HUGE_FRAMINGS = {"sse": "text/event-stream", "ndjson": "application/x-ndjson",
                 "array": "application/json"}


# ---- small helpers ------------------------------------------------------
def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def chunk(data: bytes) -> bytes:  # one HTTP/1.1 chunk
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj) -> bytes:
    return b"data: " + dumps(obj).encode() + b"\n\n"


def named_sse(name, obj) -> bytes:  # Anthropic's "event:" + "data:" pair
    return b"event: " + name.encode() + b"\ndata: " + dumps(obj).encode() + b"\n\n"


def fast(rendered: bytes):
    """Turn an event rendered with MARK as its token into token -> bytes.

    Concatenating the halves around the marker is byte-identical to
    rendering the whole event again, and much cheaper for `long N`."""
    pre, post = rendered.split(dumps(MARK).encode(), 1)
    return lambda tok: pre + dumps(tok).encode() + post


def numbered(rendered: bytes, start):
    """Like fast(), for an event with SEQ_MARK as its sequence_number before
    MARK: the i-th token rendered gets sequence number start + i."""
    pre, rest = rendered.split(dumps(SEQ_MARK).encode(), 1)
    mid, post = rest.split(dumps(MARK).encode(), 1)
    counter = itertools.count(start)
    return lambda tok: b"".join((pre, b"%d" % next(counter), mid, dumps(tok).encode(), post))


def secs_text(x):  # 1 -> "1", 0.2 -> "0.2"
    return ("%.3f" % x).rstrip("0").rstrip(".")


def number(text, default=None):
    """A finite, non-negative float from text (default if text is None)."""
    if text is None:
        return default
    try:
        x = float(text)
    except ValueError:
        return None
    return x if 0 <= x < float("inf") else None


def echo_tokens(text):
    return re.findall(r"\S+\s*|\s+", text)


def reply_tokens(text):
    """`reply`'s tokens: each line (with its newline) cut in two halves, so
    a client shows lines while they are still arriving."""
    out = []
    for line in re.findall(r"[^\n]*\n|[^\n]+", text):
        half = max(1, len(line) // 2)
        out += [piece for piece in (line[:half], line[half:]) if piece]
    return out or [""]


def thirds(text):
    n = len(text)
    return [text[:n // 3], text[n // 3:2 * n // 3], text[2 * n // 3:]]


def words(*texts):
    return sum(len(t.split()) for t in texts)


class HugeText(str):
    """The hugeline token: its JSON is written in pieces by send_huge;
    rendered whole (non-streaming replies) it is `size` x's."""
    def __new__(cls, size):
        return super().__new__(cls, HUGE_MARK)

    def __init__(self, size):
        self.size = size


class Words(Sequence):
    """Lazy "w00000 ", "w00001 ", ... so that `long 10000000` stays cheap."""
    def __init__(self, n, prefix="w"): self.n, self.prefix = n, prefix
    def __len__(self): return self.n
    def __getitem__(self, i): return "%s%05d " % (self.prefix, range(self.n)[i])


# ---- scenarios ------------------------------------------------------------
@dataclass
class Plan:
    """What to answer, independent of the wire format."""
    kind: str
    tokens: Sequence = ()          # answer text tokens
    reasoning: Sequence = ()       # reasoning tokens, sent before the text
    calls: list = field(default_factory=list)  # [(tool name, args dict)]
    finish: str = "stop"           # stop | tool | filter
    end: str = "finish"            # finish | reset | stall | truncate
    rate: float | None = None      # tokens per second (slow)
    error: tuple | None = None     # a failure reply, see Format.failure
    gate: int | None = None        # the error hits only the first N attempts
    window: float | None = None    # ratelimited-window seconds
    raw: str | None = None         # window-reset header value, verbatim
    usage: bool = True
    malformed: bool = False
    trickle: bool = False
    split: bool = False
    huge: int = 0                  # hugeline: bytes of the one big token
    framing: str | None = None     # hugeline: sse | ndjson | array (None: the format's own)
    content_type: str | None = None  # ctype: the Content-Type a stream claims
    late: float = 0.0              # lateheaders: seconds before the headers
    window_limit: tuple | None = None  # window: (requests, seconds)
    gateway: tuple | None = None   # gateway: (header | usage | both, value text)
    same_ids: bool = False         # sameids: OpenAI call ids "call_<k>" in every answer
    custom: bool = False           # custom: the call is a freeform tool's, args {"input": text}
    cached: int = 0                # cached: prompt tokens read from the cache

    def output_tokens(self):
        return len(self.reasoning) + len(self.tokens) + 3 * len(self.calls)


def parse_scenario(text, seq, whole=None):
    """Map user text to a Plan; `whole` is the text echo repeats."""
    whole = text if whole is None else whole
    key, *args = text.split() or [""]
    n = int(args[0]) if args and args[0].isdecimal() else None
    if key == "split":
        plan = parse_scenario(text.split(None, 1)[1] if args else "", seq, whole)
        plan.split, plan.trickle = True, False
        return plan
    if key == "sameids":
        plan = parse_scenario(text.split(None, 1)[1] if args else "", seq, whole)
        plan.same_ids = True
        return plan
    if key in ("long", "reset", "stall", "truncate") and len(args) == 1 and n is not None:
        return Plan(key, Words(n), end="finish" if key == "long" else key)
    if key == "failafter" and len(args) == 1 and n is not None:
        return Plan(key, Words(n), end="fail")
    if key == "slow" and len(args) == 2 and n is not None:
        rate = number(args[1])
        if rate:
            return Plan("slow", Words(n), rate=rate)
    if key == "http" and n is not None and 400 <= n <= 599:
        message = text.split(None, 2)[2:]
        return Plan("http", error=("http", n, message[0].strip() if message else None))
    if key == "reason" and len(args) == 1 and n is not None:
        return Plan("reason", ["done"], reasoning=Words(n, "r"))
    if key == "tool" and args:
        _, name, *raw = text.split(None, 2)
        try:
            obj = json.loads(raw[0]) if raw else {}
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            return Plan("tool", calls=[(name, obj)], finish="tool")
    if key == "texttool" and args:
        # a model without native tools: the call written in the answer's text
        _, name, *raw = text.split(None, 2)
        try:
            arguments = json.loads(raw[0]) if raw else {}
        except ValueError:
            arguments = raw[0]
        block = "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        return Plan("texttool", ["Calling ", name + ". ", block[:7], block[7:]])
    if key == "custom" and len(args) >= 2:
        _, name, raw = text.split(None, 2)
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if isinstance(value, str):
            return Plan("custom", calls=[(name, {"input": value})], finish="tool", custom=True)
    if key == "tools2" and not args:
        return Plan("tools2", calls=[("read_file", {"path": "a.txt"}),
                                     ("read_file", {"path": "b.txt"})], finish="tool")
    if key == "window-reset" and args:
        return Plan("window-reset", ["ok"], raw=" ".join(args))
    if key == "retry429-raw" and len(args) >= 2 and n is not None and n >= 1:
        return Plan(key, echo_tokens(f"ok after {n}"), error=("retry-raw", " ".join(args[1:])),
                    gate=n)
    gated = {"retry429": 2, "fail5xx": 2, "noretry": 1, "overloaded": 1}
    if key in gated and n is not None and 1 <= len(args) <= gated[key]:
        extra = args[1] if len(args) > 1 else None
        error = None
        if key == "retry429" and (secs := number(extra, 1.0)) is not None:
            error = ("retry", secs)
        elif key == "fail5xx" and (extra is None or extra.isdecimal()):
            status = int(extra or 502)
            error = ("fail", status) if 500 <= status <= 599 else None
        elif key in ("noretry", "overloaded"):
            error = (key,)
        if error:
            return Plan(key, echo_tokens(f"ok after {n}"), error=error, gate=n)
    if key == "needkey" and len(args) == 1:
        return Plan("needkey", ["ok"], error=("needkey", args[0]))
    if key == "badkey" and args in ([], ["masked"]):
        return Plan("badkey", error=("badkey", bool(args)))
    if key == "context" and not args:
        return Plan("context", error=("context",))
    if key == "filtered400" and not args:
        return Plan("filtered400", error=("filtered400",))
    if key == "filtered" and not args:
        return Plan("filtered", Words(1), finish="filter")
    if key == "nousage":
        return Plan("nousage", echo_tokens(whole), usage=False)
    if key == "ratelimited-window" and len(args) <= 1:
        secs = number(args[0] if args else None, 60.0)
        if secs is not None:
            return Plan("ratelimited-window", ["ok"], window=secs)
    if key == "hugeline" and 1 <= len(args) <= 2:
        mb = number(args[0])
        framing = args[1] if len(args) > 1 else None
        if mb and mb <= 4096 and (framing is None or framing in HUGE_FRAMINGS):
            size = int(mb * (1 << 20))
            return Plan("hugeline", [HugeText(size)], huge=size, framing=framing)
    if key == "window" and len(args) in (2, 3) and args[0].isdecimal() and 0 < int(args[0]) <= 10000:
        secs = number(args[1])
        late = int(args[2]) if len(args) == 3 and args[2].isdecimal() and int(args[2]) <= 10000 else 0
        if secs and 0 < secs <= 3600 and (len(args) == 2 or late):
            return Plan("window", ["ok"], window_limit=(int(args[0]), secs, late / 1000))
    if key == "lateheaders" and len(args) == 1 and args[0].isdecimal() and int(args[0]) <= 60000:
        return Plan("lateheaders", ["ok"], late=int(args[0]) / 1000)
    if key == "gateway" and len(args) == 2 and args[0] in ("header", "usage", "both"):
        return Plan("gateway", ["ok"], gateway=(args[0], args[1]))
    if key == "cached" and len(args) == 1 and n is not None:
        return Plan("cached", ["ok"], cached=n)
    if key == "ctype" and len(args) == 1:
        return Plan("ctype", ["ok"], content_type=args[0])
    if key in ("reply", "replystall") and len(args) >= 2:
        # the answer is the JSON string after the number; text after it
        # (what else the message holds) is ignored
        rest = text.split(None, 2)[2]
        try:
            answer, _ = json.JSONDecoder().raw_decode(rest)
        except ValueError:
            answer = None
        num = number(args[0])
        if isinstance(answer, str) and num is not None and num >= 0:
            tokens = reply_tokens(answer)
            if key == "reply":
                return Plan("reply", tokens, rate=num or None)
            return Plan("replystall", tokens[:int(num)], end="stall")
    if key == "unicode":
        return Plan("unicode", UNICODE_TOKENS, trickle=True)
    if key == "malformed":
        return Plan("malformed", ["ok ", "after"], malformed=True)
    if key == "count":
        return Plan("count", [str(seq)])
    return Plan("echo", echo_tokens(whole))


def credential(headers):
    """The API key a request carried, from whichever header its format uses."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return (headers.get("x-api-key") or headers.get("x-goog-api-key")
            or headers.get("api-key") or auth)


# ---- request view and stream description -------------------------------------
@dataclass
class Req:
    """The parts of a generation request the scenarios look at."""
    model: object
    stream: bool
    text: str                 # the last user message's text
    results: list | None      # tool results, when they end the conversation
    prompt: int               # prompt "tokens" (words)
    want_usage: bool = True
    invalid: tuple | None = None  # (status, body, headers): refused before any plan
    extra: dict = field(default_factory=dict)  # format-specific request details


class Tokens:
    """A run of token events, rendered lazily and logged from index `first`."""
    def __init__(self, items, render, first=0):
        self.items, self.render, self.first = items, render, first


@dataclass
class Stream:
    head: list    # opening events
    body: list    # events (bytes) and Tokens runs; reset/stall/truncate cut here
    tail: list    # closing events
    fail: list | None = None  # failafter's events after the body (None: midstream_error)


class Format:
    """One wire format: request parsing, replies, errors, streams."""
    name = ""
    FINISH = {}  # plan finish -> this format's finish/stop reason
    FRAMING = "sse"  # how its streams are framed (a HUGE_FRAMINGS key)

    def stream_fields(self, content_type=None):
        """A stream's response head fields: its Content-Type, no caching, chunked."""
        return ["Content-Type: " + (content_type or HUGE_FRAMINGS[self.FRAMING]),
                "Cache-Control: no-cache", "Transfer-Encoding: chunked"]

    def failure(self, error, req, credential=""):
        """(status, body, headers) for a plan's error tuple."""
        what, *args = error
        if what == "http":
            return self.error(args[0], args[1], req.model)
        if what == "filtered400":
            status, body, headers = self.error(400, "The response was filtered due to the prompt triggering "
                                               "the content management policy. Please modify your prompt.", req.model)
            if isinstance(body.get("error"), dict) and "code" in body["error"]:
                body["error"]["type"], body["error"]["code"] = None, "content_filter"
            return status, body, headers
        if what == "needkey":
            return self.error(401, "Incorrect API key provided.", req.model)
        if what == "badkey":
            shown = credential[:8] + "*" * 20 + credential[-4:] if args[0] else credential
            return self.error(401, f"Incorrect API key provided: {shown}.", req.model)
        if what == "retry":
            return self.error(429, None, req.model, retry=args[0])
        if what == "retry-raw":
            return self.raw_retry(args[0], req)
        if what == "fail":
            return self.error(args[0], None, req.model)
        if what == "noretry":
            status, body, headers = self.error(503, None, req.model)
            return status, body, headers + ["x-should-retry: false"]
        if what == "context":
            return self.context_error()
        return self.overloaded_error()

    def text_parts(self, plan, render, broken, first):
        """The text token run(s); malformed puts `broken` after the first."""
        if plan.malformed:
            return [Tokens(plan.tokens[:1], render, first), broken,
                    Tokens(plan.tokens[1:], render, first + 1)]
        return [Tokens(plan.tokens, render, first)]

    def window_headers(self, secs):
        return []

    def raw_window_headers(self, value):
        return []

    def window_state_headers(self, limit, remaining, secs):
        """What a response inside a request window says of it (window)."""
        return [f"x-ratelimit-limit: {limit}", f"x-ratelimit-remaining: {remaining}",
                f"x-ratelimit-reset: {secs:.3f}"]

    def raw_retry(self, value, req):
        """A 429 whose retry-after is `value`, verbatim (retry429-raw)."""
        status, body, _ = self.error(429, None, req.model)
        return status, body, [f"retry-after: {value}"]

    def midstream_error(self, req, seq):
        """The in-band failure after tokens (failafter)."""
        return self.overloaded_stream(req, seq)


class OpenAI(Format):
    name = "openai"
    FINISH = {"stop": "stop", "tool": "tool_calls", "filter": "content_filter"}
    ERRORS = {  # status -> (type, code, default message)
        401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
        404: ("invalid_request_error", "model_not_found",
              "The model `{model}` does not exist or you do not have access to it."),
        429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
        500: ("server_error", None,
              "The server had an error while processing your request."),
    }

    def parse(self, body):
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        results = []
        for m in reversed(messages):
            if not (isinstance(m, dict) and m.get("role") == "tool"):
                break
            results.insert(0, message_text(m))
        opts = body.get("stream_options")
        return Req(model=body.get("model", ""), stream=body.get("stream") is True,
                   text=user_text(message_pieces(users[-1])) if users else "",
                   results=results or None,
                   prompt=sum(len(message_text(m).split()) for m in messages),
                   want_usage=isinstance(opts, dict) and opts.get("include_usage") is True)

    def error(self, status, message=None, model=None, retry=None, kind=None, code=None):
        """OpenAI error body; explicit kind/code override the table; a
        `retry` (retry429) adds retry-after-ms to the 429's retry-after."""
        dkind, dcode, default = self.ERRORS.get(
            status, ("api_error", None, PHRASES.get(status, "Error")))
        body = {"error": {"message": message or default.replace("{model}", str(model)),
                          "type": kind or dkind, "param": None, "code": code or dcode}}
        headers = []
        if status == 429:
            headers.append(f"retry-after: {secs_text(1 if retry is None else retry)}")
            if retry is not None:
                headers.append(f"retry-after-ms: {round(retry * 1000)}")
        return status, body, headers

    def bad_json(self):
        return self.error(400, "We could not parse the JSON body of your request.",
                          kind="invalid_request_error")

    def context_error(self):
        return 400, {"error": {
            "message": "This model's maximum context length is 128000 tokens. However, "
                       "your messages resulted in 130000 tokens. Please reduce the "
                       "length of the messages.",
            "type": "invalid_request_error", "param": "messages",
            "code": "context_length_exceeded"}}, []

    def overloaded_error(self):
        return self.error(503, "Overloaded", kind="server_error")

    def overloaded_stream(self, req, seq):
        return [sse({"error": {"message": "Overloaded", "type": "server_error"}})]

    def window_headers(self, secs):
        return ["x-ratelimit-limit-requests: 60", "x-ratelimit-remaining-requests: 0",
                f"x-ratelimit-reset-requests: {secs_text(secs)}s"]

    def raw_window_headers(self, value):
        return ["x-ratelimit-limit-requests: 60", "x-ratelimit-remaining-requests: 0",
                f"x-ratelimit-reset-requests: {value}"]

    def window_state_headers(self, limit, remaining, secs):
        return [f"x-ratelimit-limit-requests: {limit}", f"x-ratelimit-remaining-requests: {remaining}",
                f"x-ratelimit-reset-requests: {secs:.3f}s"]

    def usage(self, plan, req):
        out = plan.output_tokens()
        prompt = req.prompt + plan.cached
        usage = {"prompt_tokens": prompt, "completion_tokens": out,
                 "total_tokens": prompt + out}
        if plan.cached:
            usage["prompt_tokens_details"] = {"cached_tokens": plan.cached}
        if plan.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": len(plan.reasoning)}
        if plan.gateway and plan.gateway[0] in ("usage", "both"):
            def no_constant(name):  # NaN / Infinity are not JSON: sent as strings
                raise ValueError(name)
            try:
                usage["cost"] = json.loads(plan.gateway[1], parse_constant=no_constant)
            except ValueError:
                usage["cost"] = plan.gateway[1]
        return usage

    @staticmethod
    def call_ids(plan, seq):
        if plan.same_ids:
            return [f"call_{k}" for k in range(len(plan.calls))]
        return [f"call_scn{seq}_{k}" for k in range(len(plan.calls))]

    def stream(self, plan, req, seq):
        base = {"id": f"chatcmpl-scn{seq}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": req.model}

        def event(delta, finish=None):
            return sse({**base, "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish}]})

        body = []
        if plan.reasoning:
            body.append(Tokens(plan.reasoning, fast(event({"reasoning_content": MARK}))))
        body += self.text_parts(plan, fast(event({"content": MARK})),
                                b'data: {"choices":[{"delta":{"content":\n\n',
                                len(plan.reasoning))
        ids = self.call_ids(plan, seq)
        for k, (name, _) in enumerate(plan.calls):
            body.append(event({"tool_calls": [{"index": k, "id": ids[k], "type": "function",
                                               "function": {"name": name, "arguments": ""}}]}))
        pieces = [thirds(dumps(args)) for _, args in plan.calls]
        for part in range(3):  # calls interleave piece by piece
            for k in range(len(plan.calls)):
                body.append(event({"tool_calls": [
                    {"index": k, "function": {"arguments": pieces[k][part]}}]}))
        tail = [event({}, self.FINISH[plan.finish])]
        if req.want_usage and plan.usage:
            tail.append(sse({**base, "choices": [], "usage": self.usage(plan, req)}))
        tail.append(b"data: [DONE]\n\n")
        return Stream([event({"role": "assistant", "content": ""})], body, tail)

    def complete(self, plan, req, seq):
        message = {"role": "assistant", "content": "".join(plan.tokens)}
        if plan.reasoning:
            message["reasoning_content"] = "".join(plan.reasoning)
        if plan.calls:
            message["content"] = None
            message["tool_calls"] = [
                {"id": cid, "type": "function",
                 "function": {"name": name, "arguments": dumps(args)}}
                for cid, (name, args) in zip(self.call_ids(plan, seq), plan.calls)]
        reply = {"id": f"chatcmpl-scn{seq}", "object": "chat.completion",
                 "created": int(time.time()), "model": req.model,
                 "choices": [{"index": 0, "finish_reason": self.FINISH[plan.finish],
                              "message": message}]}
        if plan.usage:
            reply["usage"] = self.usage(plan, req)
        return reply

    def models(self):
        return {"object": "list", "data": [
            {"id": m, "object": "model", "owned_by": "mia-scenarios"} for m in MODELS]}


HARNESS_ELEMENT = re.compile(r"<([A-Za-z][\w-]*)>.*?</\1>", re.S)
INTERRUPTED = re.compile(r"\[Request interrupted by user[^\]\n]*\]")
SYSTEM_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>\s*", re.S)


def user_text(pieces):
    """The user's own words from a user message's text pieces, without the
    markup agent harnesses add (see SCENARIOS); unchanged when there is none."""
    original, kept, changed = pieces, [], False
    marks = [i for i, piece in enumerate(pieces) if INTERRUPTED.fullmatch(piece.strip())]
    if marks and marks[-1] + 1 < len(pieces):  # what came before was the cut-off turn
        pieces, changed = pieces[marks[-1] + 1:], True
    for piece in pieces:
        bare = SYSTEM_REMINDER.sub("", piece)
        if bare != piece:
            bare, changed = bare.strip(), True
        if HARNESS_ELEMENT.sub("", bare).strip():
            kept.append(bare)
        else:
            changed = True
    return "".join(kept) if changed and kept else "".join(original)


def message_pieces(msg):
    """An OpenAI message's text pieces: its string content or its text parts."""
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, list):
        return [p["text"] for p in content if isinstance(p, dict)
                and p.get("type") == "text" and isinstance(p.get("text"), str)]
    return [content] if isinstance(content, str) else []


def message_text(msg):
    """An OpenAI message's text: its string content or its text parts."""
    return "".join(message_pieces(msg))


class Anthropic(Format):
    name = "anthropic"
    FINISH = {"stop": "end_turn", "tool": "tool_use", "filter": "refusal"}
    TYPES = {400: "invalid_request_error", 401: "authentication_error",
             403: "permission_error", 404: "not_found_error", 413: "request_too_large",
             429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
    MESSAGES = {401: "invalid x-api-key", 404: "model: {model}",
                429: "This request would exceed your rate limit.",
                500: "Internal server error", 529: "Overloaded"}

    def parse(self, body):
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        messages = [m for m in messages if isinstance(m, dict)]
        users = [m for m in messages if m.get("role") == "user"]
        results = None
        last = messages[-1] if messages else {}
        blocks = last.get("content") if last.get("role") == "user" else None
        if isinstance(blocks, list):
            results = [blocks_text(b.get("content")) for b in blocks
                       if isinstance(b, dict) and b.get("type") == "tool_result"] or None
        prompt = words(blocks_text(body.get("system")),
                       *(blocks_text(m.get("content"), tool_results=True) for m in messages))
        return Req(model=body.get("model", ""), stream=body.get("stream") is True,
                   text=user_text(block_pieces(users[-1].get("content"))) if users else "",
                   results=results, prompt=prompt)

    def error(self, status, message=None, model=None, retry=None):
        kind = self.TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        default = self.MESSAGES.get(status, PHRASES.get(status, "Error"))
        body = {"type": "error", "error": {
            "type": kind, "message": message or default.replace("{model}", str(model))}}
        headers = [f"retry-after: {secs_text(1 if retry is None else retry)}"] \
            if status == 429 else []
        return status, body, headers

    def bad_json(self):
        return self.error(400, "The request body is not valid JSON.")

    def context_error(self):
        return self.error(400, "prompt is too long: 210000 tokens > 200000 maximum")

    def overloaded_error(self):
        return self.error(529)

    def start_events(self, plan, req, seq):
        usage = {"input_tokens": req.prompt if plan.usage else 0,
                 "output_tokens": 1 if plan.usage else 0,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": plan.cached}
        return [named_sse("message_start", {"type": "message_start", "message": {
                    "id": f"msg_scn{seq}", "type": "message", "role": "assistant",
                    "model": req.model, "content": [], "stop_reason": None,
                    "stop_sequence": None, "usage": usage}}),
                named_sse("ping", {"type": "ping"})]

    def overloaded_stream(self, req, seq):
        return self.start_events(Plan("overloaded"), req, seq) + self.midstream_error(req, seq)

    def midstream_error(self, req, seq):
        return [named_sse("error", {
            "type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]

    def window_headers(self, secs):
        reset = datetime.fromtimestamp(math.ceil(time.time() + secs), timezone.utc)
        return ["anthropic-ratelimit-requests-limit: 50",
                "anthropic-ratelimit-requests-remaining: 0",
                f"anthropic-ratelimit-requests-reset: {reset:%Y-%m-%dT%H:%M:%SZ}"]

    def raw_window_headers(self, value):
        return ["anthropic-ratelimit-requests-limit: 50",
                "anthropic-ratelimit-requests-remaining: 0",
                f"anthropic-ratelimit-requests-reset: {value}"]

    def window_state_headers(self, limit, remaining, secs):
        reset = datetime.fromtimestamp(time.time() + secs, timezone.utc)
        return [f"anthropic-ratelimit-requests-limit: {limit}",
                f"anthropic-ratelimit-requests-remaining: {remaining}",
                f"anthropic-ratelimit-requests-reset: {reset:%Y-%m-%dT%H:%M:%S.%fZ}"]

    def stream(self, plan, req, seq):
        def block_event(kind, index, **fields):
            return named_sse(kind, {"type": kind, "index": index, **fields})

        def delta_renderer(index, kind, key):
            return fast(block_event("content_block_delta", index,
                                    delta={"type": kind, key: MARK}))

        blocks = []  # each: its events, ending with its content_block_stop
        if plan.reasoning:
            i = len(blocks)
            blocks.append([
                block_event("content_block_start", i, content_block={
                    "type": "thinking", "thinking": "", "signature": ""}),
                Tokens(plan.reasoning, delta_renderer(i, "thinking_delta", "thinking")),
                block_event("content_block_delta", i, delta={
                    "type": "signature_delta", "signature": f"sig-scn{seq}"}),
                block_event("content_block_stop", i)])
        if plan.tokens or not plan.calls:
            i = len(blocks)
            broken = (b'event: content_block_delta\ndata: {"type":"content_block_delta",'
                      b'"index":%d,"delta":{"type":"text_delta","text":\n\n' % i)
            blocks.append([
                block_event("content_block_start", i, content_block={"type": "text", "text": ""}),
                *self.text_parts(plan, delta_renderer(i, "text_delta", "text"), broken,
                                 len(plan.reasoning)),
                block_event("content_block_stop", i)])
        for k, (name, args) in enumerate(plan.calls):
            i = len(blocks)
            blocks.append([
                block_event("content_block_start", i, content_block={
                    "type": "tool_use", "id": f"toolu_scn{seq}_{k}", "name": name, "input": {}}),
                *(block_event("content_block_delta", i, delta={
                    "type": "input_json_delta", "partial_json": piece})
                  for piece in thirds(dumps(args))),
                block_event("content_block_stop", i)])
        events = [e for block in blocks for e in block]
        finish = [named_sse("message_delta", {
                      "type": "message_delta",
                      "delta": {"stop_reason": self.FINISH[plan.finish], "stop_sequence": None},
                      "usage": {"output_tokens": plan.output_tokens() if plan.usage else 0}}),
                  named_sse("message_stop", {"type": "message_stop"})]
        # The last block's stop belongs to the tail so truncate leaves it open.
        return Stream(self.start_events(plan, req, seq), events[:-1], events[-1:] + finish)

    def complete(self, plan, req, seq):
        content = []
        if plan.reasoning:
            content.append({"type": "thinking", "thinking": "".join(plan.reasoning),
                            "signature": f"sig-scn{seq}"})
        if plan.tokens or not plan.calls:
            content.append({"type": "text", "text": "".join(plan.tokens)})
        content += [{"type": "tool_use", "id": f"toolu_scn{seq}_{k}", "name": name,
                     "input": args} for k, (name, args) in enumerate(plan.calls)]
        return {"id": f"msg_scn{seq}", "type": "message", "role": "assistant",
                "model": req.model, "content": content,
                "stop_reason": self.FINISH[plan.finish], "stop_sequence": None,
                "usage": {"input_tokens": req.prompt if plan.usage else 0,
                          "output_tokens": plan.output_tokens() if plan.usage else 0,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": plan.cached}}

    def models(self):
        data = [{"type": "model", "id": mid, "display_name": name,
                 "created_at": "2025-01-01T00:00:00Z"} for mid, name in ANTHROPIC_MODELS]
        return {"data": data, "has_more": False,
                "first_id": data[0]["id"], "last_id": data[-1]["id"]}


def block_pieces(content):
    """Anthropic content's text pieces: a string, or its text blocks' texts."""
    if isinstance(content, str):
        return [content]
    return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"
            and isinstance(b.get("text"), str)] if isinstance(content, list) else []


def blocks_text(content, tool_results=False):
    """Anthropic content's text: a string, or its text blocks (and, if
    asked, the text of its tool_result blocks) concatenated."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    out = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            out.append(block["text"])
        elif tool_results and block.get("type") == "tool_result":
            out.append(" " + blocks_text(block.get("content")) + " ")
    return "".join(out)


class Gemini(Format):
    name = "gemini"
    FINISH = {"stop": "STOP", "tool": "STOP", "filter": "SAFETY"}
    STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
              404: "NOT_FOUND", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED",
              499: "CANCELLED", 500: "INTERNAL", 501: "NOT_IMPLEMENTED",
              503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
    MESSAGES = {401: "API key not valid.", 404: "models/{model} is not found.",
                429: "Quota exceeded for requests.", 500: "Internal error encountered.",
                503: "The model is overloaded."}
    SAFETY = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH",
               "blocked": True}]

    def parse(self, body, model="", stream=False):
        contents = body.get("contents")
        contents = [c for c in contents if isinstance(c, dict)] \
            if isinstance(contents, list) else []
        users = [c for c in contents if c.get("role", "user") == "user"]
        results = None
        if contents and contents[-1].get("role", "user") in ("user", "function"):
            results = [dumps(p["functionResponse"].get("response", {}))
                       for p in parts_of(contents[-1])
                       if isinstance(p.get("functionResponse"), dict)] or None
        prompt = words(parts_text(body.get("systemInstruction")),
                       *(parts_text(c, tool_results=True) for c in contents))
        return Req(model=model, stream=stream, results=results, prompt=prompt,
                   text=user_text(part_pieces(users[-1])) if users else "")

    def error(self, status, message=None, model=None, retry=None):
        state = self.STATUS.get(status, "UNAVAILABLE" if status >= 500 else "FAILED_PRECONDITION")
        default = self.MESSAGES.get(status, PHRASES.get(status, "Error"))
        err = {"code": status, "message": message or default.replace("{model}", str(model)),
               "status": state}
        if status == 429:
            err["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                               "retryDelay": f"{secs_text(1 if retry is None else retry)}s"}]
        return status, {"error": err}, []

    def raw_retry(self, value, req):
        status, body, _ = self.error(429, None, req.model)
        body["error"]["details"][0]["retryDelay"] = value
        return status, body, []

    def bad_json(self):
        return self.error(400, "Invalid JSON payload received.")

    def context_error(self):
        return self.error(400, "The input token count (1200000) exceeds the maximum "
                          "number of tokens allowed (1048576).")

    def overloaded_error(self):
        return self.error(503)

    def overloaded_stream(self, req, seq):
        return [sse({"error": {"code": 503, "message": "The model is overloaded.",
                               "status": "UNAVAILABLE"}})]

    def usage(self, plan, req):
        text = len(plan.tokens) + 3 * len(plan.calls)
        usage = {"promptTokenCount": req.prompt, "candidatesTokenCount": text,
                 "totalTokenCount": req.prompt + plan.output_tokens()}
        if plan.reasoning:
            usage["thoughtsTokenCount"] = len(plan.reasoning)
        return usage

    def response(self, plan, req, seq, parts, finish=None):
        """One GenerateContentResponse; with `finish`, the final one."""
        candidate = {"content": {"parts": parts, "role": "model"}}
        if finish == "SAFETY":
            candidate = {"finishReason": finish, "safetyRatings": self.SAFETY}
        elif finish:
            candidate["finishReason"] = finish
        out = {"candidates": [{**candidate, "index": 0}]}
        if finish and plan.usage:
            out["usageMetadata"] = self.usage(plan, req)
        out["modelVersion"] = req.model
        out["responseId"] = f"scn{seq}"
        return out

    def stream(self, plan, req, seq):
        body = []
        if plan.reasoning:
            body.append(Tokens(plan.reasoning, fast(sse(self.response(
                plan, req, seq, [{"text": MARK, "thought": True}])))))
        body += self.text_parts(plan, fast(sse(self.response(plan, req, seq, [{"text": MARK}]))),
                                b'data: {"candidates":[{"content":{"parts":[{"text":\n\n',
                                len(plan.reasoning))
        last = [{"functionCall": {"name": name, "args": args}} for name, args in plan.calls]
        final = self.response(plan, req, seq, last or [{"text": ""}], self.FINISH[plan.finish])
        return Stream([], body, [sse(final)])

    def complete(self, plan, req, seq):
        parts = []
        if plan.reasoning:
            parts.append({"text": "".join(plan.reasoning), "thought": True})
        if plan.tokens:
            parts.append({"text": "".join(plan.tokens)})
        parts += [{"functionCall": {"name": name, "args": args}} for name, args in plan.calls]
        reply = self.response(plan, req, seq, parts or [{"text": ""}], self.FINISH[plan.finish])
        if plan.finish == "filter":  # keep the text that came before the block
            reply["candidates"][0]["content"] = {"parts": parts, "role": "model"}
        return reply

    def models(self):
        return {"models": [{"name": f"models/{mid}", "displayName": name,
                            "supportedGenerationMethods": ["generateContent",
                                                           "streamGenerateContent"]}
                           for mid, name in GEMINI_MODELS]}


def parts_of(content):
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def part_pieces(content):
    """A Gemini content's text parts (not thoughts)."""
    return [p["text"] for p in parts_of(content)
            if isinstance(p.get("text"), str) and not p.get("thought")]


def parts_text(content, tool_results=False):
    """A Gemini content's text parts (not thoughts) concatenated; with
    tool_results, functionResponse JSON too."""
    out = []
    for p in parts_of(content):
        if isinstance(p.get("text"), str) and not p.get("thought"):
            out.append(p["text"])
        elif tool_results and isinstance(p.get("functionResponse"), dict):
            out.append(" " + dumps(p["functionResponse"].get("response", {})) + " ")
    return "".join(out)


class Ollama(Format):
    name = "ollama"
    FRAMING = "ndjson"
    # Ollama has no stop reason of its own for tool calls or filtering.
    FINISH = {"stop": "stop", "tool": "stop", "filter": "stop"}
    MESSAGES = {400: "invalid request", 401: "unauthorized",
                404: 'model "{model}" not found, try pulling it first',
                429: "too many requests, please try again later",
                500: "an error was encountered while running the model",
                503: "server busy, please try again.  maximum pending requests exceeded"}
    BROKEN = b'{"model":"m","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":\n'

    def parse(self, body):
        messages = body.get("messages")
        messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
        users = [m for m in messages if m.get("role") == "user"]
        results = []
        for m in reversed(messages):
            if m.get("role") != "tool":
                break
            results.insert(0, message_text(m))
        return Req(model=body.get("model", ""), stream=body.get("stream") is not False,
                   text=user_text(message_pieces(users[-1])) if users else "",
                   results=results or None,
                   prompt=sum(len(message_text(m).split()) for m in messages))

    def error(self, status, message=None, model=None, retry=None):
        default = self.MESSAGES.get(status, PHRASES.get(status, "Error").lower())
        headers = [f"retry-after: {secs_text(1 if retry is None else retry)}"] \
            if status == 429 else []
        return status, {"error": message or default.replace("{model}", str(model))}, headers

    def bad_json(self):
        return self.error(400, "invalid character in the request body: not JSON")

    def context_error(self):
        return self.error(400, "input length exceeds maximum context length")

    def overloaded_error(self):
        return self.error(503)

    def overloaded_stream(self, req, seq):
        return [line({"error": "an error was encountered while running the model: "
                               "unexpected EOF"})]

    @staticmethod
    def created_at():
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def done(self, plan, req, created):
        """The closing object's fields: done, the reason, counts, timings (ns)."""
        out = plan.output_tokens()
        fields = {"done_reason": self.FINISH[plan.finish], "done": True,
                  "total_duration": 1_000_000 + req.prompt * 1_000_000 + out * 10_000_000,
                  "load_duration": 1_000_000}
        if plan.usage:
            fields.update(prompt_eval_count=req.prompt,
                          prompt_eval_duration=req.prompt * 1_000_000,
                          eval_count=out, eval_duration=out * 10_000_000)
        return fields

    def stream(self, plan, req, seq):
        created = self.created_at()

        def event(message, **extra):
            return line({"model": req.model, "created_at": created,
                         "message": {"role": "assistant", "content": "", **message},
                         **(extra or {"done": False})})

        body = []
        if plan.reasoning:
            body.append(Tokens(plan.reasoning, fast(event({"thinking": MARK}))))
        body += self.text_parts(plan, fast(event({"content": MARK})), self.BROKEN,
                                len(plan.reasoning))
        if plan.calls:
            body.append(event({"tool_calls": [{"function": {"name": name, "arguments": args}}
                                              for name, args in plan.calls]}))
        return Stream([], body, [event({}, **self.done(plan, req, created))])

    def complete(self, plan, req, seq):
        message = {"role": "assistant", "content": "".join(plan.tokens)}
        if plan.reasoning:
            message["thinking"] = "".join(plan.reasoning)
        if plan.calls:
            message["tool_calls"] = [{"function": {"name": name, "arguments": args}}
                                     for name, args in plan.calls]
        created = self.created_at()
        return {"model": req.model, "created_at": created, "message": message,
                **self.done(plan, req, created)}

    def models(self):
        return {"models": [{"name": name, "model": name, "modified_at": "2025-01-01T00:00:00Z",
                            "size": 1000 + i, "digest": "%064x" % (i + 1),
                            "details": {"format": "gguf", "family": "scenario"}}
                           for i, name in enumerate(OLLAMA_MODELS)]}


def line(obj) -> bytes:  # one NDJSON line
    return dumps(obj).encode() + b"\n"


class Azure(OpenAI):
    """Azure OpenAI: OpenAI's format (same name, same parsing), each stream
    opening with Azure's prompt-filter chunk, which has no choices."""
    SAFE = {k: {"filtered": False, "severity": "safe"}
            for k in ("hate", "self_harm", "sexual", "violence")}

    def stream(self, plan, req, seq):
        s = super().stream(plan, req, seq)
        preamble = sse({"choices": [], "created": 0, "id": "", "model": "", "object": "",
                        "prompt_filter_results": [
                            {"prompt_index": 0, "content_filter_results": self.SAFE}]})
        return Stream([preamble] + s.head, s.body, s.tail)


AZURE = Azure()


def item_pieces(item):
    """The text pieces of a Responses input item's content (a string or
    input_text / output_text / text parts; a function_call_output's output)."""
    content = item.get("content") if "content" in item else item.get("output")
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content or [] if isinstance(p, dict)
            and p.get("type") in ("input_text", "output_text", "text")
            and isinstance(p.get("text"), str)] if isinstance(content, list) else []


def input_items(body):
    """A Responses request's "input" as a list of item objects."""
    items = body.get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


class Responses(OpenAI):
    """OpenAI's Responses API: OpenAI's errors and models, its own items and
    events (see RESPONSES in the module notes)."""
    name = "responses"

    def parse(self, body):
        items = input_items(body)
        users = [i for i in items if i.get("role") == "user" and i.get("type", "message") == "message"]
        results = []
        for i in reversed(items):  # function_call_output, custom_tool_call_output, ...
            if not str(i.get("type")).endswith("_call_output"):
                break
            results.insert(0, "".join(item_pieces(i)))
        instructions = body.get("instructions") if isinstance(body.get("instructions"), str) else ""
        include = body.get("include") if isinstance(body.get("include"), list) else []
        req = Req(model=body.get("model", ""), stream=body.get("stream") is True,
                  text=user_text(item_pieces(users[-1])) if users else "",
                  results=results or None,
                  prompt=words(instructions, *("".join(item_pieces(i)) for i in items)),
                  extra={"encrypted": "reasoning.encrypted_content" in include,
                         "store": body.get("store") is not False,
                         "instructions": instructions})
        req.invalid = self.stateless_check(items, req)
        return req

    def stateless_check(self, items, req):
        """Refuses reasoning this server did not issue and, for a stateless
        client, a function call of ours sent back without its reasoning."""
        kept = set()
        for i in items:
            if i.get("type") == "reasoning":
                enc = i.get("encrypted_content")
                if enc is None and not req.extra["store"]:
                    return self.error(404, f"Item with id '{i.get('id')}' not found. Items are not "
                                      "persisted when `store` is set to false. Try again with "
                                      "`store` set to true, or remove this item from your input.",
                                      kind="invalid_request_error")
                m = ENCRYPTED.fullmatch(enc) if isinstance(enc, str) else None
                if enc is not None and not m:
                    return self.error(400, f"The encrypted content for item {i.get('id')} could "
                                      "not be verified.", kind="invalid_request_error",
                                      code="invalid_encrypted_content")
                if m:
                    kept.add(m.group(1))
            if i.get("type") == "function_call" and req.extra["encrypted"] and not req.extra["store"]:
                m = OUR_CALL.fullmatch(str(i.get("call_id")))
                if m and m.group(1) not in kept:
                    return self.error(400, f"function_call {i.get('call_id')} came back without the "
                                      f"reasoning item before it (encrypted_content gAAAA-scn"
                                      f"{m.group(1)}): a stateless client must send it back "
                                      "(scenario server check).", kind="invalid_request_error")
        return None

    def usage(self, plan, req):
        out = plan.output_tokens()
        instructions = req.extra.get("instructions", "")
        cached = min(req.prompt, len(PIECE.findall(instructions)) if PROMPT_TOKENS == "pieces"
                     else words(instructions))
        return {"input_tokens": req.prompt, "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": out, "output_tokens_details": {"reasoning_tokens": len(plan.reasoning)},
                "total_tokens": req.prompt + out}

    def response(self, req, seq, status, output=(), usage=None, **extra):
        return {"id": f"resp_scn{seq}", "object": "response", "created_at": int(time.time()),
                "status": status, "background": False, "error": None, "incomplete_details": None,
                "instructions": req.extra.get("instructions") or None, "model": req.model,
                "output": list(output), "parallel_tool_calls": True, "previous_response_id": None,
                "reasoning": {"effort": "medium", "summary": None},
                "store": req.extra.get("store", True), "temperature": 1.0,
                "text": {"format": {"type": "text"}, "verbosity": "medium"},
                "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled",
                "usage": usage, "user": None, "metadata": {}, **extra}

    def items(self, plan, req, seq):
        """The finished output items: reasoning, message (if text), calls."""
        reasoning = {"id": f"rs_scn{seq}", "type": "reasoning", "summary": []}
        if req.extra.get("encrypted"):
            reasoning["encrypted_content"] = f"gAAAA-scn{seq}"
        if plan.reasoning:
            reasoning["summary"] = [{"type": "summary_text", "text": "".join(plan.reasoning)}]
        out = [reasoning]
        if plan.tokens or not plan.calls:
            out.append({"id": f"msg_scn{seq}", "type": "message", "status": "completed",
                        "content": [{"type": "output_text", "annotations": [], "logprobs": [],
                                     "text": "".join(plan.tokens)}], "role": "assistant"})
        for cid, (name, args) in zip(self.call_ids(plan, seq), plan.calls):
            if plan.custom:
                out.append({"id": "ctc" + cid[4:], "type": "custom_tool_call", "status": "completed",
                            "call_id": cid, "input": args["input"], "name": name})
                continue
            out.append({"id": "fc" + cid[4:], "type": "function_call", "status": "completed",
                        "arguments": dumps(args), "call_id": cid, "name": name})
        return out

    def end(self, plan, req, seq, output):
        usage = self.usage(plan, req) if plan.usage else None
        if plan.finish == "filter":
            return "response.incomplete", self.response(
                req, seq, "incomplete", output, usage,
                incomplete_details={"reason": "content_filter"})
        return "response.completed", self.response(req, seq, "completed", output, usage)

    def stream(self, plan, req, seq):
        n = [0]

        def ev(kind, **fields):
            n[0] += 1
            return named_sse(kind, {"type": kind, "sequence_number": n[0] - 1, **fields})

        def run(kind, items, first, **fields):
            render = numbered(named_sse(kind, {"type": kind, "sequence_number": SEQ_MARK,
                                               **fields, "delta": MARK}), n[0])
            n[0] += len(items)
            return Tokens(items, render, first)

        head = [ev("response.created", response=self.response(req, seq, "in_progress")),
                ev("response.in_progress", response=self.response(req, seq, "in_progress"))]
        done = self.items(plan, req, seq)
        body = []
        at = 0
        reasoning = done[0]
        body.append(ev("response.output_item.added", output_index=at,
                       item={**reasoning, "summary": []}))
        if plan.reasoning:
            where = {"item_id": reasoning["id"], "output_index": at, "summary_index": 0}
            text = "".join(plan.reasoning)
            body.append(ev("response.reasoning_summary_part.added", **where,
                           part={"type": "summary_text", "text": ""}))
            body.append(run("response.reasoning_summary_text.delta", plan.reasoning, 0, **where))
            body.append(ev("response.reasoning_summary_text.done", **where, text=text))
            body.append(ev("response.reasoning_summary_part.done", **where,
                           part={"type": "summary_text", "text": text}))
        body.append(ev("response.output_item.done", output_index=at, item=reasoning))
        for item in done[1:]:
            at += 1
            if item["type"] == "message":
                where = {"item_id": item["id"], "output_index": at, "content_index": 0}
                body.append(ev("response.output_item.added", output_index=at,
                               item={**item, "status": "in_progress", "content": []}))
                body.append(ev("response.content_part.added", **where, part={
                    "type": "output_text", "annotations": [], "logprobs": [], "text": ""}))
                broken = (b'event: response.output_text.delta\ndata: {"type":'
                          b'"response.output_text.delta","delta":\n\n')
                first = len(plan.reasoning)
                if plan.malformed:
                    body += [run("response.output_text.delta", plan.tokens[:1], first, **where, logprobs=[]),
                             broken,
                             run("response.output_text.delta", plan.tokens[1:], first + 1, **where, logprobs=[])]
                else:
                    body.append(run("response.output_text.delta", plan.tokens, first, **where, logprobs=[]))
                tail_text = item["content"][0]["text"]
                closing = [ev("response.output_text.done", **where, text=tail_text, logprobs=[]),
                           ev("response.content_part.done", **where, part=item["content"][0]),
                           ev("response.output_item.done", output_index=at, item=item)]
                body += closing
                continue
            where = {"item_id": item["id"], "output_index": at}
            if item["type"] == "custom_tool_call":
                body.append(ev("response.output_item.added", output_index=at,
                               item={**item, "status": "in_progress", "input": ""}))
                for piece in thirds(item["input"]):
                    body.append(ev("response.custom_tool_call_input.delta", **where, delta=piece))
                body.append(ev("response.custom_tool_call_input.done", **where, input=item["input"]))
                body.append(ev("response.output_item.done", output_index=at, item=item))
                continue
            body.append(ev("response.output_item.added", output_index=at,
                           item={**item, "status": "in_progress", "arguments": ""}))
            for piece in thirds(item["arguments"]):
                body.append(ev("response.function_call_arguments.delta", **where, delta=piece))
            body.append(ev("response.function_call_arguments.done", **where,
                           arguments=item["arguments"]))
            body.append(ev("response.output_item.done", output_index=at, item=item))
        mark = n[0]
        kind, final = self.end(plan, req, seq, done)
        tail = [ev(kind, response=final)]
        n[0] = mark
        fail = self.failure_events(ev, req, seq)
        return Stream(head, body, tail, fail)

    def failure_events(self, ev, req, seq):
        error = {"type": "server_error", "code": "server_error", "message": "Overloaded",
                 "param": None}
        failed = self.response(req, seq, "failed",
                               error={"code": "server_error", "message": "Overloaded"})
        return [ev("error", error=error), ev("response.failed", response=failed)]

    def overloaded_stream(self, req, seq):
        s = self.stream(Plan("overloaded"), req, seq)
        n = [2]

        def ev(kind, **fields):
            n[0] += 1
            return named_sse(kind, {"type": kind, "sequence_number": n[0] - 1, **fields})
        return s.head + self.failure_events(ev, req, seq)

    def complete(self, plan, req, seq):
        return self.end(plan, req, seq, self.items(plan, req, seq))[1]


RESPONSES = Responses()

FORMATS = {"openai": OpenAI(), "anthropic": Anthropic(), "gemini": Gemini(), "ollama": Ollama()}
OPENAI, ANTHROPIC, GEMINI = FORMATS["openai"], FORMATS["anthropic"], FORMATS["gemini"]
OLLAMA = FORMATS["ollama"]


def read_texts(fmt, body):
    """Everything the model reads in a request body, as text pieces (see
    --prompt-tokens): system, messages, tool calls and results, tools."""
    out = []

    def add(v):
        if isinstance(v, str):
            out.append(v)
        elif v is not None:
            out.append(dumps(v))

    if fmt == "gemini":
        if isinstance(body.get("generateContentRequest"), dict):
            body = body["generateContentRequest"]
        for content in [body.get("systemInstruction")] + list(body.get("contents") or []):
            for p in parts_of(content):
                if isinstance(p.get("text"), str):
                    add(p["text"])
                if isinstance(p.get("functionCall"), dict):
                    add(p["functionCall"].get("name"))
                    add(p["functionCall"].get("args", {}))
                if isinstance(p.get("functionResponse"), dict):
                    add(p["functionResponse"].get("response", {}))
        for tool in body.get("tools") or []:
            for d in (tool.get("functionDeclarations") or []) if isinstance(tool, dict) else []:
                add(d.get("name"))
                add(d.get("description"))
                add(d.get("parameters"))
        return out
    if fmt == "responses":
        add(body.get("instructions") if isinstance(body.get("instructions"), str) else None)
        for item in input_items(body):
            out.extend(item_pieces(item))
            if item.get("type") == "function_call":
                add(item.get("name"))
                add(item.get("arguments"))
        for t in body.get("tools") or []:
            if isinstance(t, dict):
                add(t.get("name"))
                add(t.get("description"))
                add(t.get("parameters"))
        return out
    if fmt == "anthropic":
        system = body.get("system")
        add(system if isinstance(system, str) else blocks_text(system))
        for m in body.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "text":
                    add(b.get("text"))
                elif b.get("type") == "tool_use":
                    add(b.get("name"))
                    add(b.get("input", {}))
                elif b.get("type") == "tool_result":
                    add(blocks_text(b.get("content")))
        for t in body.get("tools") or []:
            if isinstance(t, dict):
                add(t.get("name"))
                add(t.get("description"))
                add(t.get("input_schema"))
        return out
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        add(message_text(m))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                add(fn.get("name"))
                add(fn.get("arguments"))
    for t in body.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict):
            add(fn.get("name"))
            add(fn.get("description"))
            add(fn.get("parameters"))
    return out


def prompt_tokens(fmt, body, words_count):
    """A request's prompt tokens under the --prompt-tokens rule."""
    if PROMPT_TOKENS != "pieces":
        return words_count
    return sum(len(PIECE.findall(t)) for t in read_texts(fmt, body))


# ---- HTTP plumbing ----------------------------------------------------------
class Gone(Exception):
    """The client closed the connection."""


class BadRequest(Exception):
    """A request we refuse; answered with an error and the connection closed."""


class Out:
    """Where one response goes.  The head is written whole; body events
    become one HTTP chunk each (or raw bytes without chunking).  In split
    mode body bytes wait in `pending` until drain() writes them in random
    1-16 byte pieces, each its own chunk and each drained."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.rng = None
        self.chunked = False
        self.pending = bytearray()

    def split(self, seq):
        self.rng = random.Random(seq)

    def head(self, status, fields, close, extra=()):
        self.chunked = "Transfer-Encoding: chunked" in fields
        lines = [f"HTTP/1.1 {status} {PHRASES.get(status, 'Error')}", *fields,
                 f"Connection: {'close' if close else 'keep-alive'}", *extra]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    def write(self, *events):
        if self.rng:
            self.pending += b"".join(events)
        elif self.chunked:
            self.writer.write(b"".join(map(chunk, events)))
        else:
            self.writer.write(b"".join(events))

    async def drain(self):
        data, pos = bytes(self.pending), 0
        self.pending.clear()
        while pos < len(data):
            piece = data[pos:pos + self.rng.randint(1, 16)]
            pos += len(piece)
            self.writer.write(chunk(piece) if self.chunked else piece)
            await self.writer.drain()
            self.check_gone()
            await asyncio.sleep(0)  # let other connections run
        await self.writer.drain()

    def check_gone(self):
        # EOF from the client (even a half-close) counts as having left.
        if self.reader.at_eof() or self.writer.transport.is_closing():
            raise Gone

    async def sleep_until(self, deadline):
        """Sleep in short slices so a departed client is noticed quickly."""
        loop = asyncio.get_running_loop()
        while (left := deadline - loop.time()) > 0:
            self.check_gone()
            await asyncio.sleep(min(left, 0.05))
        self.check_gone()


class Server:
    def __init__(self, log_path):
        self.seq = 0
        self.requests = []
        self.attempts = {}  # (format name, user text) -> attempts so far
        self.request_windows = {}  # format name -> (window start, requests in it)
        self.connections = 0  # TCP connections accepted so far (a request's "conn")
        self.tasks = set()
        self.sends = open(log_path, "a", buffering=1 << 16) if log_path else None

    # ---- connection handling -------------------------------------------
    async def on_connect(self, reader, writer):
        task = asyncio.current_task()
        self.tasks.add(task)
        self.connections += 1
        conn = self.connections
        sock = writer.get_extra_info("socket")
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # drain() now waits until everything reached the kernel.
            writer.transport.set_write_buffer_limits(high=0)
            while await self.one_request(reader, writer, conn):
                pass
        except (ConnectionError, Gone, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # shutdown; ending normally keeps 3.11's stream callback quiet
        except Exception as exc:  # never let one request kill the server
            print(f"scenario_server: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            self.tasks.discard(task)
            writer.close()

    async def one_request(self, reader, writer, conn=0):
        """Serve one request; return True to keep the connection open."""
        out = Out(reader, writer)
        try:
            req = await self.read_request(reader, writer)
        except BadRequest as exc:
            status, message = exc.args
            return await self.reply(out, OPENAI.error(
                status, message, kind="invalid_request_error"), close=True)
        if req is None:
            return False
        method, target, headers, body, close = req
        path, _, query = target.partition("?")

        if path == "/_requests":
            if method == "DELETE":
                self.requests.clear()
                self.attempts.clear()
                return await self.reply(out, (200, {"deleted": True}, []), close)
            if method == "GET":
                return await self.reply(out, (200, self.requests, []), close)
        self.seq += 1
        seq = self.seq
        target = self.record(seq, method, target, headers, body, conn)

        if method == "GET" and path == "/v1/models":
            anthropic = "anthropic-version" in headers or "x-api-key" in headers
            fmt = ANTHROPIC if anthropic else OPENAI
            return await self.reply(out, (200, fmt.models(), []), close)
        if method == "GET" and path == "/v1beta/models":
            return await self.reply(out, (200, GEMINI.models(), []), close)
        if method == "POST" and path == "/v1/chat/completions":
            return await self.generate(out, seq, OPENAI, body, close, headers)
        if method == "POST" and path == "/v1/responses":
            return await self.generate(out, seq, RESPONSES, body, close, headers)
        if method == "POST" and path == "/api/chat":
            return await self.generate(out, seq, OLLAMA, body, close, headers)
        if method == "GET" and path == "/api/tags":
            return await self.reply(out, (200, OLLAMA.models(), []), close)
        if method == "POST" and path == "/v1/messages":
            return await self.generate(out, seq, ANTHROPIC, body, close, headers)
        if method == "POST" and path == "/v1/messages/count_tokens":
            if not isinstance(body, dict):
                return await self.reply(out, ANTHROPIC.bad_json(), close)
            n = prompt_tokens("anthropic", body, ANTHROPIC.parse(body).prompt)
            return await self.reply(out, (200, {"input_tokens": n}, []), close)
        counting = GEMINI_COUNT.fullmatch(path)
        if method == "POST" and counting:
            if not isinstance(body, dict):
                return await self.reply(out, GEMINI.bad_json(), close)
            inner = body.get("generateContentRequest")
            inner = inner if isinstance(inner, dict) else {"contents": body.get("contents") or []}
            n = prompt_tokens("gemini", inner, GEMINI.parse(inner).prompt)
            return await self.reply(out, (200, {"totalTokens": n}, []), close)
        gemini = GEMINI_PATH.fullmatch(path)
        if method == "POST" and gemini:
            stream = gemini.group(2) == "streamGenerateContent"
            if stream and "sse" not in parse_qs(query).get("alt", []):
                return await self.reply(out, GEMINI.error(
                    400, "streamGenerateContent requires alt=sse: this server streams "
                    "only server-sent events, not a JSON array."), close)
            return await self.generate(out, seq, GEMINI, body, close, headers,
                                       model=unquote(gemini.group(1)), stream=stream)
        azure = AZURE_PATH.fullmatch(path)
        if (method == "POST" and azure) or (method == "GET" and path == "/openai/models"):
            if not parse_qs(query).get("api-version"):
                return await self.reply(out, OPENAI.error(
                    404, "Resource not found", kind="invalid_request_error", code="404"), close)
            if azure:
                return await self.generate(out, seq, AZURE, body, close, headers)
            return await self.reply(out, (200, OPENAI.models(), []), close)
        if path.startswith("/v1beta/"):
            return await self.reply(out, GEMINI.error(
                404, f"Unknown request URL: {method} {target}."), close)
        if path.startswith("/api/"):
            return await self.reply(out, OLLAMA.error(
                404, f"404 page not found: {method} {target}"), close)
        return await self.reply(out, OPENAI.error(
            404, f"Unknown request URL: {method} {target}.",
            kind="invalid_request_error", code="unknown_url"), close)

    def record(self, seq, method, target, headers, body, conn=0):
        """Log a request with its secrets redacted; return the safe target."""
        path, question, query = target.partition("?")
        pieces, key_in_url = [], False
        for piece in query.split("&") if query else []:
            name = piece.partition("=")[0]
            if unquote_plus(name) == "key":
                piece, key_in_url = name + "=<redacted>", True
            pieces.append(piece)
        query = "&".join(pieces)
        entry = {"seq": seq, "conn": conn, "method": method, "path": path + question + query,
                 "query": query, "body": body,
                 "headers": {k: "<redacted>" if k in SECRET_HEADERS else v
                             for k, v in headers.items()}}
        if key_in_url:
            entry["key_in_url"] = True
        self.requests.append(entry)
        return entry["path"]

    async def read_request(self, reader, writer):
        """Parse one request; None on a clean EOF between requests."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise BadRequest(400, "Incomplete request head.")
            return None
        except asyncio.LimitOverrunError:
            raise BadRequest(431, "Request headers too large.")
        lines = head.decode("latin-1").lstrip("\r\n").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise BadRequest(400, "Malformed request line.")
        method, target, version = parts
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            if sep:
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
        conn = headers.get("connection", "").lower()
        close = "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)
        if headers.get("transfer-encoding", "identity").lower() != "identity":
            raise BadRequest(411, "Chunked request bodies are not supported.")
        length = headers.get("content-length", "0")
        if not re.fullmatch(r"[0-9]{1,12}", length) or int(length) > MAX_BODY:
            raise BadRequest(400, "Invalid Content-Length.")
        if int(length) and headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        raw = await reader.readexactly(int(length))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        return method, target, headers, body, close

    async def reply(self, out, answer, close):
        """Send (status, JSON-able body, extra headers) as one response."""
        status, obj, extra = answer
        body = dumps(obj).encode()
        out.head(status, ["Content-Type: application/json",
                          f"Content-Length: {len(body)}"], close, extra)
        out.write(body)
        await out.drain()
        return not close

    # ---- generation (all formats) ----------------------------------------
    def plan(self, fmt, req, seq):
        if req.results is not None:
            return Plan("toolresult", echo_tokens("tool said: " + " | ".join(req.results)))
        plan = parse_scenario(req.text, seq)
        if plan.gate is not None:
            key = (fmt.name, req.text)
            self.attempts[key] = self.attempts.get(key, 0) + 1
            if self.attempts[key] > plan.gate:
                plan.error = None
        return plan

    async def generate(self, out, seq, fmt, body, close, headers, **route):
        if not isinstance(body, dict):
            return await self.reply(out, fmt.bad_json(), close)
        req = fmt.parse(body, **route)
        if req.invalid:
            return await self.reply(out, req.invalid, close)
        req.prompt = prompt_tokens(fmt.name, body, req.prompt)
        plan = self.plan(fmt, req, seq)
        if plan.late:
            await asyncio.sleep(plan.late)
        if plan.split:
            out.split(seq)
        if plan.error and plan.error[0] == "needkey" and credential(headers) == plan.error[1]:
            plan.error = None
        if plan.error:
            if plan.error[0] == "overloaded" and req.stream:
                out.head(200, fmt.stream_fields(), close)
                out.write(*fmt.overloaded_stream(req, seq))
                await self.end_body(out)
                return not close
            return await self.reply(out, fmt.failure(plan.error, req, credential(headers)), close)
        if plan.window_limit is not None:
            limit, secs, late = plan.window_limit
            now = time.monotonic()
            start, used = self.request_windows.get(fmt.name, (now, 0))
            if now >= start + secs:
                start, used = now, 0
            used += 1
            self.request_windows[fmt.name] = (start, used)
            left = start + secs - now
            if late:
                await asyncio.sleep(late)
            if used > limit:
                return await self.reply(out, fmt.error(429, None, req.model, retry=max(1, math.ceil(left))), close)
            window_state = fmt.window_state_headers(limit, limit - used, left)
        else:
            window_state = []
        extra = fmt.window_headers(plan.window) if plan.window is not None else []
        extra += window_state
        if plan.raw is not None:
            extra = fmt.raw_window_headers(plan.raw)
        if plan.gateway and plan.gateway[0] in ("header", "both"):
            extra = extra + [f"x-litellm-response-cost: {plan.gateway[1]}"]
        if not req.stream:
            if plan.end == "fail":
                return await self.reply(out, fmt.overloaded_error(), close)
            if plan.end == "reset":
                return await self.reset(out)
            if plan.end == "stall":
                return await self.stall(out)
            if plan.huge:
                reply = dumps(fmt.complete(plan, req, seq)).replace(dumps(HUGE_MARK)[1:-1], "x" * plan.huge)
                return await self.reply(out, (200, json.loads(reply), extra), close)
            return await self.reply(out, (200, fmt.complete(plan, req, seq), extra), close)
        if plan.huge:
            return await self.send_huge(out, fmt, plan, fmt.stream(plan, req, seq), close)
        return await self.send_stream(out, seq, plan, fmt.stream(plan, req, seq), close, extra,
                                      fmt.stream_fields(plan.content_type), fmt, req)

    async def send_stream(self, out, seq, plan, stream, close, extra, fields, fmt=None, req=None):
        out.head(200, fields, close, extra)
        out.write(*stream.head)
        try:
            if plan.trickle:
                await self.trickle(out, seq, stream)
                return not close
            for part in stream.body:
                if isinstance(part, Tokens):
                    await self.send_tokens(out, seq, part, plan.rate)
                else:
                    out.write(part)
            if plan.end == "reset":
                return await self.reset(out)
            if plan.end == "stall":
                return await self.stall(out)
            if plan.end == "fail":
                out.write(*(stream.fail if stream.fail is not None else fmt.midstream_error(req, seq)))
            elif plan.end != "truncate":
                out.write(*stream.tail)
            await self.end_body(out)
            return not close
        finally:
            self.flush_sends()

    async def send_huge(self, out, fmt, plan, stream, close):
        """The hugeline scenario: every event framed as plan.framing (the
        format's own by default), the big token's x's written HUGE_PIECE
        bytes at a time, each drained."""
        events = list(stream.head)
        for part in stream.body:
            if isinstance(part, Tokens):
                events += [part.render(tok) for tok in part.items]
            else:
                events.append(part)
        events += stream.tail

        def payload(event):  # b"[event: X\n]data: JSON\n\n" or b"JSON\n" -> b"JSON"
            if fmt.FRAMING == "ndjson":
                return event.rstrip(b"\n")
            data = re.sub(rb"^(event: [^\n]*\n)?data: ", b"", event)
            return data[:-2] if data.endswith(b"\n\n") else data

        framing = plan.framing or fmt.FRAMING
        framed = []
        for i, event in enumerate(events):
            if framing == fmt.FRAMING:
                pass
            elif framing == "ndjson":
                event = payload(event) + b"\n"
            elif framing == "sse":
                event = b"data: " + payload(event) + b"\n\n"
            else:
                event = (b"[" if i == 0 else b",") + payload(event)
            framed.append(event)
        if framing == "array":
            framed.append(b"]")
        out.head(200, fmt.stream_fields(HUGE_FRAMINGS[framing]), close)
        mark = dumps(HUGE_MARK).encode()
        for event in framed:
            if mark not in event:
                out.write(event)
                continue
            pre, post = event.split(mark, 1)
            out.write(pre + b'"')
            await out.drain()
            piece = b"x" * HUGE_PIECE
            for left in range(plan.huge, 0, -HUGE_PIECE):
                out.write(piece[:left])
                await out.drain()
                out.check_gone()
            out.write(b'"' + post)
        await self.end_body(out)
        return not close

    def log_send(self, seq, index, stamp):
        if self.sends:
            self.sends.write(f"{seq} {index} {stamp}\n")

    def flush_sends(self):
        if self.sends:
            self.sends.flush()

    async def end_body(self, out):
        await out.drain()
        # Flush first so the log is complete once the client sees the end.
        self.flush_sends()
        out.writer.write(b"0\r\n\r\n")
        await out.writer.drain()

    async def send_tokens(self, out, seq, run, rate=None):
        items, render, first = run.items, run.render, run.first
        n = len(items)
        if rate:
            start = asyncio.get_running_loop().time()
            for i in range(n):
                await out.sleep_until(start + i / rate)
                out.write(render(items[i]))
                await out.drain()
                self.log_send(seq, first + i, time.monotonic_ns())
            return
        for lo in range(0, n, BATCH):
            hi = min(n, lo + BATCH)
            out.write(*(render(items[i]) for i in range(lo, hi)))
            await out.drain()
            stamp = time.monotonic_ns()
            for i in range(lo, hi):
                self.log_send(seq, first + i, stamp)
            out.check_gone()

    async def trickle(self, out, seq, stream):
        """Write body and tail in 3-byte HTTP chunks (the unicode scenario)."""
        body, ends = b"", []  # ends: (offset just past a token event, log index)
        for part in stream.body:
            if isinstance(part, Tokens):
                for i, tok in enumerate(part.items):
                    body += part.render(tok)
                    ends.append((len(body), part.first + i))
            else:
                body += part
        body += b"".join(stream.tail)
        await out.writer.drain()
        logged = 0
        for pos in range(0, len(body), 3):
            out.writer.write(chunk(body[pos:pos + 3]))
            await out.writer.drain()
            stamp = time.monotonic_ns()
            while logged < len(ends) and ends[logged][0] <= pos + 3:
                self.log_send(seq, ends[logged][1], stamp)
                logged += 1
            await out.sleep_until(asyncio.get_running_loop().time() + 0.002)
        await self.end_body(out)

    async def reset(self, out):
        await out.drain()
        sock = out.writer.get_extra_info("socket")
        # Give the peer up to 1 s to acknowledge what was sent, because an
        # RST discards data still waiting in our send queue (Linux only).
        try:
            for _ in range(100):
                queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4)
                if struct.unpack("i", queued)[0] == 0:
                    break
                await asyncio.sleep(0.01)
        except (OSError, AttributeError):
            pass
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        out.writer.transport.abort()
        return False

    async def stall(self, out):
        await out.drain()
        while await out.reader.read(65536):
            pass
        return False


async def serve(args):
    app = Server(args.log_sends)
    server = await asyncio.start_server(app.on_connect, args.host, args.port)
    print(f"LISTENING {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    for task in list(app.tasks):
        task.cancel()
    await asyncio.gather(*app.tasks, return_exceptions=True)
    await server.wait_closed()
    if app.sends:
        app.sends.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description="Offline fake LLM server.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log-sends", metavar="FILE")
    parser.add_argument("--prompt-tokens", choices=["words", "pieces"], default="words",
                        help="how prompt tokens are counted (see the module's notes)")
    args = parser.parse_args(argv)
    global PROMPT_TOKENS
    PROMPT_TOKENS = args.prompt_tokens
    if args.host not in ("127.0.0.1", "::1"):
        parser.error("only loopback hosts are allowed")
    asyncio.run(serve(args))
    return 0


def fork_child(argv, report):
    """In a forked child: runs one server, its LISTENING line written to
    the `report` pipe; never returns into the parent's loop."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(report, 1)  # print(LISTENING) lands in the pipe
        os.close(report)
        os.close(null)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        code = main(argv)
    except SystemExit as e:  # argparse's refusals
        code = e.code if isinstance(e.code, int) else 2
    except BaseException as e:  # noqa: BLE001 - reported, then the child ends
        try:
            os.write(1, f"ERROR {type(e).__name__}: {e}\n".encode())
        except OSError:
            pass
    finally:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os._exit(code)


def fork_servers():
    """--fork: one server per stdin line (a JSON list of arguments)."""
    children = set()

    def reap(*_):
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)

    signal.signal(signal.SIGCHLD, reap)
    for request in sys.stdin:
        try:
            argv = json.loads(request)
            if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
                raise ValueError("a line must be a JSON list of strings")
        except ValueError as e:
            print(f"ERROR {e}", flush=True)
            continue
        r, w = os.pipe()
        # SIGCHLD waits until the pid is in `children`: a server that ends at
        # once must not be reaped first and leave a pid the cleanup below
        # would signal after another process took it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        pid = os.fork()
        if pid == 0:
            os.close(r)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            fork_child(argv, w)
        children.add(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            first = pipe.readline().decode(errors="replace").strip()
        if first.startswith("LISTENING "):
            print(f"{pid} {first}", flush=True)
        else:
            print(f"ERROR {first or 'the server ended before it listened'}", flush=True)
    # The servers left end before this process does (SIGKILL after 10 s).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in list(children):
            try:
                os.kill(pid, sig)  # not yet reaped: still our child, not a reused pid
            except ProcessLookupError:
                children.discard(pid)
        deadline = time.monotonic() + 10
        while children and time.monotonic() < deadline:
            for pid in list(children):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        children.discard(pid)
                except ChildProcessError:
                    children.discard(pid)
            time.sleep(0.01)
        if not children:
            break
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--fork"]:
        sys.exit(fork_servers())
    sys.exit(main())
