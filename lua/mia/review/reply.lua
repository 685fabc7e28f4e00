--- The review's answer to the core's permission call: ACP's outcome (the
--- chosen option, or `cancelled`), with mia's extras under `_meta.mia`
--- (`reason`: a rejection's reason for the model; `content`: the text the
--- user made of the proposal).

local M = {}

--- Answers review `call` with option `id` and mia's extras; no `id` is
--- ACP's `cancelled` outcome. A core that cannot be loaded or a call that
--- is already answered is left alone: nobody waits for the answer then.
--- @param call any the core's call handle
--- @param id string|nil
--- @param extra table|nil
function M.send(call, id, extra)
  local loader = require("mia.core")
  local answer = { outcome = id and { outcome = "selected", optionId = id } or { outcome = "cancelled" } }
  if extra and next(extra) then
    answer._meta = { mia = extra }
  end
  local ok, core = pcall(loader.get)
  if ok and core then
    pcall(core.reply, call, true, answer)
  end
end

return M
