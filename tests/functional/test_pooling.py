"""Connection pooling as the provider contract sets it: at most 6
connections per host, counted at the scenario server."""

from conftest import scenario_setup

PARALLEL = """
_G.done, _G.failed = 0, {}
for i = 1, ... do
  require('mia').stream({ messages = { { role = 'user', content = 'slow 4 20' } } }, {
    on_done = function() done = done + 1 end,
    on_error = function(e) table.insert(failed, e.message) end,
  })
end
"""


def test_20_parallel_requests_use_at_most_6_connections(editor_factory, server):
    ed = editor_factory(setup=scenario_setup(server))
    ed.lua(PARALLEL, 20)
    ed.wait("done + #failed == 20", 60000)
    assert ed.lua("return failed") == []
    posts = [r for r in server.requests() if r["method"] == "POST"]
    assert len(posts) == 20
    connections = {r["conn"] for r in posts}
    assert 2 <= len(connections) <= 6, sorted(connections)
