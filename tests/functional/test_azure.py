"""Azure OpenAI (`kind = "azure_openai"`) end to end: a real Neovim asks the
scenario server through Azure's addressing (deployment in the path,
api-version in the query, the key in an `api-key` header)."""

import pytest
from pynvim.api.common import NvimError

KEY = "az-test-secret-0123456789"


@pytest.fixture
def ed(editor_factory, server):
    root = f"http://127.0.0.1:{server.port}"
    opts = {
        "model": "azure/my-gpt",
        "providers": {"azure": {"kind": "azure_openai", "base_url": root, "api_key_env": "MIA_TEST_AZURE_KEY"}},
        "retry": {"initial_delay_ms": 10, "multiplier": 2, "jitter": False, "max_retries": 1},
    }
    return editor_factory(env={"MIA_TEST_AZURE_KEY": KEY}, setup=opts)


def posts(server):
    return [r for r in server.requests() if r["method"] == "POST"]


def test_a_prompt_goes_to_the_deployment_with_the_api_version_and_the_key_in_api_key(ed, server):
    ed.nvim.command("Mia prompt echo hello from azure")
    ed.wait("require('mia.chat').state() == 'done'")
    assert ed.chat_text().endswith("echo hello from azure")
    req = posts(server)[-1]
    assert req["path"] == "/openai/deployments/my-gpt/chat/completions?api-version=2024-10-21"
    assert req["headers"].get("api-key") == "<redacted>"
    assert "authorization" not in req["headers"]
    assert req["body"]["stream"] is True
    assert "max_completion_tokens" in req["body"] or "max_tokens" not in req["body"]
    # nothing of the key reaches the screen or the messages
    assert KEY not in ed.messages() and KEY not in ed.chat_text(footers=True)


def test_the_configured_api_version_is_sent(editor_factory, server):
    root = f"http://127.0.0.1:{server.port}"
    opts = {
        "model": "az/dep",
        "providers": {"az": {"kind": "azure_openai", "base_url": root, "api_key_env": "MIA_TEST_AZURE_KEY",
                             "api_version": "2025-04-01-preview"}},
    }
    ed = editor_factory(env={"MIA_TEST_AZURE_KEY": KEY}, setup=opts)
    ed.nvim.command("Mia prompt echo versioned")
    ed.wait("require('mia.chat').state() == 'done'")
    assert posts(server)[-1]["path"].endswith("?api-version=2025-04-01-preview")


def test_a_tool_call_round_trips_through_the_chat(ed, server):
    ed.lua("""
      require('mia.tools').register({
        name = 'shout', description = 'Upper-case a word',
        parameters = { type = 'object', properties = { word = { type = 'string' } }, required = { 'word' } },
        execute = function(args) return string.upper(args.word) end,
      }, 'user')
    """)
    ed.nvim.command('Mia prompt tool shout {"word": "azure"}')
    ed.wait("require('mia.chat').state() == 'done'")
    assert "tool said: AZURE" in ed.chat_text()
    tool_msgs = [m for m in posts(server)[-1]["body"]["messages"] if m["role"] == "tool"]
    assert tool_msgs and tool_msgs[-1]["content"] == "AZURE"


def test_an_unknown_deployment_names_the_resources_models(ed, server):
    ed.nvim.command("Mia prompt http 404")
    ed.wait("require('mia.chat').state() == 'error'")
    text = ed.chat_text()
    assert "(model_not_found): azure: model `my-gpt` not found" in text
    assert "Models of azure: echo, mia-scenario" in text
    listing = [r for r in server.requests() if r["method"] == "GET"]
    assert listing and listing[-1]["path"] == "/openai/models?api-version=2024-10-21"
    assert listing[-1]["headers"].get("api-key") == "<redacted>"


def test_a_missing_key_names_the_variable(editor_factory, server):
    root = f"http://127.0.0.1:{server.port}"
    opts = {"model": "azure/d", "providers": {"azure": {"kind": "azure_openai", "base_url": root,
                                                        "api_key_env": "MIA_TEST_AZURE_UNSET"}}}
    ed = editor_factory(setup=opts)
    ed.nvim.command("Mia prompt echo no key")
    ed.wait("require('mia.chat').state() == 'error'")
    assert "azure: no API key. Set MIA_TEST_AZURE_UNSET in the environment Neovim starts from." in ed.chat_text()
    assert posts(server) == []


def test_setup_refuses_an_azure_provider_without_base_url_or_with_a_bad_api_version(editor_factory):
    ed = editor_factory()
    with pytest.raises(NvimError, match=r"`providers.az.base_url` is required for a provider of kind azure_openai"):
        ed.lua("require('mia').setup({ providers = { az = { kind = 'azure_openai' } } })")
    with pytest.raises(NvimError, match=r"`providers.az.api_version` must be a string"):
        ed.lua("require('mia').setup({ providers = { az = { kind = 'azure_openai', base_url = 'http://x', api_version = 2024 } } })")
