-- An external agent's edit review (lua/mia/review/agent.lua): which review
-- key answers with which of the agent's options, and the notes above its diff.
local agent = require("mia.review.agent")
local expect = require("expect")

local function option(id, kind, name)
  return { optionId = id, kind = kind, name = name }
end

return {
  {
    "each option kind is answered by its review key",
    function()
      local once, always, no = option("y", "allow_once"), option("a", "allow_always"), option("n", "reject_once")
      expect.eq(agent.choices({ once, always, no }), { accept = once, accept_always = always, reject = no })
      -- an agent without allow_always leaves that key without an option
      expect.eq(agent.choices({ once, no }), { accept = once, reject = no })
      -- reject_always is the reject key's option when it is the only reject
      local never = option("never", "reject_always")
      expect.eq(agent.choices({ once, never }), { accept = once, reject = never })
    end,
  },
  {
    "options the review keys cannot answer leave the edit to the plain picker",
    function()
      local once = option("y", "allow_once")
      local function refused(options, reason)
        local c, why = agent.choices(options)
        expect.eq({ c, why }, { nil, reason })
      end
      refused({}, "no options")
      refused(nil, "no options")
      refused({ once, option("y2", "allow_once") }, "two options of kind allow_once")
      refused({ once, option("n", "reject_once"), option("nn", "reject_always") }, "no key for the kind reject_always")
      refused({ once, option("m", "maybe") }, "no key for the kind maybe")
      refused({ once, { kind = "reject_once" } }, "an option without an id or a kind")
    end,
  },
  {
    "dismissing answers the agent's reject option, or cancels without one",
    function()
      expect.eq(agent.dismiss_option({ reject = option("n", "reject_once") }), "n")
      expect.eq(agent.dismiss_option({ accept = option("y", "allow_once") }), nil)
    end,
  },
  {
    "a footer label is one line of at most 24 characters",
    function()
      expect.eq(agent.label(option("y", "allow_once", "Yes\nplease")), "Yes please")
      expect.eq(agent.label(option("y", "allow_once", string.rep("é", 30))), string.rep("é", 24))
      expect.eq(agent.label(option("the-id", "allow_once")), "the-id")
    end,
  },
  {
    "the notes say what the core knows about the proposal",
    function()
      expect.eq(agent.notes("claude", {}), {})
      expect.eq(agent.notes("claude", { outside = true, root = "/r" }), {
        "⚠ outside the project (/r): claude writes it with its own tools if you accept",
      })
      local cut = { new_bytes = 1500, new_lines = 100, new_shown_lines = 50, old_bytes = 3 * 1024 * 1024, old_lines = 9, old_shown_lines = 8 }
      expect.eq(agent.notes("claude", { cut = cut }), {
        "⚠ too large to show in full: the new text has 100 lines (2 KB); the diff covers its first 50. Accepting accepts all of it.",
        "⚠ too large to show in full: the old text has 9 lines (3.0 MB); the diff covers its first 8. Accepting accepts all of it.",
      })
      expect.eq(agent.notes("claude", { fragment = true, old_from_disk = true }), {
        "the agent sent the changed part of the file: line numbers count from that part",
        "the agent sent the whole new text: the diff is against the file on disk",
      })
    end,
  },
}
