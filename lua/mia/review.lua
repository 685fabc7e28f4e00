--- Reviewing a proposed edit before it lands. The core asks with ACP's
--- `session/request_permission` whose tool call carries a `diff` content
--- (`{ type = "diff", path, oldText, newText }`); the answer is the chosen
--- option, with `_meta.mia.reason` (a rejection's reason for the model) or
--- `_meta.mia.content` (the text the user made of the proposal).
---
--- Two ways to review (`setup({ review = ... })`):
--- - "diff": a float with the unified diff (word-level highlights) and keys
---   to accept, accept for the file, allow always, reject, edit first;
--- - "hunks": the proposal shows in the target buffer as pending hunks
---   (extmarks and virtual lines), accepted or rejected one by one. Nothing
---   is written by the review: the core writes what the answer says.
---
--- This is the front door; each concern is a module under `mia/review/`:
--- `diff` (the pure diff and hunk math), `reply` (the answer to the core),
--- `float` (diff mode), `hunks` (hunks mode), `agent` (external agents'
--- options and notes), `checkpoints` (`:Mia checkpoints`, `:Mia undo`).

local M = {}

local agent = require("mia.review.agent")
local checkpoints = require("mia.review.checkpoints")
local diff = require("mia.review.diff")
local float = require("mia.review.float")
local hunks = require("mia.review.hunks")

local api = vim.api

-- The pure diff math (see mia.review.diff).
M.lines_of = diff.lines_of
M.hunks = diff.hunks
M.word_ranges = diff.word_ranges
M.unified = diff.unified
M.diff_of = diff.diff_of

-- External agents (see mia.review.agent).
M.agent_choices = agent.choices
M.agent_notes = agent.notes

--- The diff float's lines (for tests and statuslines), or nil.
M.showing_lines = float.showing_lines
--- The title and footer of the diff float on screen (for tests), or nil.
M.showing_frame = float.showing_frame

--- `:Mia review {action}` and the hunk keys.
M.actions = hunks.actions
--- Fills the quickfix list with every pending hunk in every file.
M.quickfix = hunks.quickfix
--- Every pending hunk (for tests and statuslines): `{ buf, lnum, old, new }`.
M.pending = hunks.pending

--- The lines of `:Mia checkpoints` for `list` (newest first).
M.checkpoint_lines = checkpoints.lines
--- `:Mia checkpoints`: the session's turns with the files each touched.
M.checkpoints = checkpoints.show
--- `:Mia undo`: puts back the files of the session's newest checkpoint.
M.undo = checkpoints.undo

--- Closes every review still open when the chat's answer ended (stopped,
--- failed): nobody waits for their answers any more.
local function drop_stale()
  local dropped = float.drop() + hunks.drop()
  if dropped > 0 then
    vim.notify("mia: the answer ended; its pending review was closed and nothing was written", vim.log.levels.WARN)
  end
end

local watching = false

local function watch_answer_end()
  if not watching then
    watching = true
    api.nvim_create_autocmd("User", {
      group = api.nvim_create_augroup("mia_review", { clear = true }),
      pattern = "MiaAnswerEnd",
      callback = drop_stale,
      desc = "mia: close reviews nobody waits for",
    })
  end
end

--- Reviews the edit in permission request `data` (call `call`).
function M.ask(call, data, d)
  watch_answer_end()
  if require("mia.config").get().review == "hunks" then
    local ok, placed = pcall(hunks.place, { call = call, data = data, diff = d })
    if ok and placed then
      return
    end
    if not ok then
      vim.notify("mia: the hunks could not be placed (" .. tostring(placed) .. "); showing the diff", vim.log.levels.WARN)
    end
  end
  float.enqueue(call, data, d)
end

--- Reviews external agent `agent`'s permission request `data` (call
--- `call`) whose tool call carries `diff`, in the diff float (also with
--- `review = "hunks"`: the agent writes the file itself and takes one
--- answer for the whole edit). False, and nothing shown, when the agent's
--- options do not map to the review's keys.
function M.ask_agent(call, data, d, name)
  local choices = agent.choices(data.options)
  if not choices then
    return false
  end
  watch_answer_end()
  float.enqueue(call, data, d, { name = tostring(name), choices = choices })
  return true
end

return M
