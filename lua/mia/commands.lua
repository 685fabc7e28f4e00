--- `:Mia {subcommand}`: parsing, dispatch and completion. Errors reach the
--- user as one notification, never as a Lua traceback.

local M = {}

--- @type table<string, { desc: string, run: fun(args: string, opts: table) }>
--- The store's filter for `:Mia costs model|provider {id}`: `id` may be
--- "provider/model" (split at the first "/" when the part before it names
--- a configured provider, as models may hold "/" themselves; both then
--- filter) or a bare id.
--- @param scope "model"|"provider"
--- @param id string
--- @return { model?: string, provider?: string }
function M.model_filter(scope, id)
  local head, rest = id:match("^([^/]+)/(.+)$")
  local providers = (require("mia.config").get() or {}).providers or {}
  if head and (providers[head] or vim.tbl_contains(require("mia.config")._names().providers, head)) then
    return { provider = head, model = rest }
  end
  return { [scope] = id }
end

M.subcommands = {
  prompt = {
    desc = "send {text} to the model (with a range: include the selected lines)",
    run = function(args, opts)
      local context
      if opts.range and opts.range > 0 then
        local lines = vim.api.nvim_buf_get_lines(0, opts.line1 - 1, opts.line2, false)
        local ft = vim.bo.filetype
        context = string.format("```%s\n%s\n```", ft, table.concat(lines, "\n"))
      end
      -- Slash commands and @-mentions are looked for only where the text can
      -- hold one: a plain prompt loads neither module (the first prompt's
      -- time is mostly loading).
      if not context and args:match("^%s*/") and require("mia.slash").dispatch(args) then
        return
      end
      if not args:find("@", 1, true) then
        require("mia.chat").prompt(args, { context = context })
        return
      end
      -- @-mentions attach what they name (|mia-mentions|); with none, or only
      -- editor text and files, this runs at once and errors reach the caller.
      local mentions = require("mia.mentions")
      mentions.expand(args, function(err, mentioned, attachments)
        if err then
          error("mia: " .. err .. " (the message was not sent)", 0)
        end
        if mentioned then
          context = context and (context .. "\n\n" .. mentioned) or mentioned
        end
        require("mia.chat").prompt(args, { context = context, attachments = attachments })
        mentions.sent(attachments)
      end)
    end,
  },
  agent = {
    desc = "switch the chat to an external ACP agent: :Mia agent {name} (`mia` switches back)",
    run = function(args)
      require("mia.agents").switch(args)
    end,
  },
  paste = {
    desc = "attach the clipboard's image to the next message (needs wl-paste, xclip or pngpaste)",
    run = function()
      require("mia.paste").paste()
    end,
  },
  stop = {
    desc = "cancel the answer in flight (and any :Mia edit streaming)",
    run = function()
      require("mia.api").stop()
    end,
  },
  edit = {
    desc = "rewrite the range (else the function or paragraph at the cursor) as {instruction} says, as pending hunks: |mia-edit|",
    run = function(args, opts)
      require("mia.edit").edit(args, opts)
    end,
  },
  open = {
    desc = "open the chat window with its prompt",
    run = function()
      require("mia.prompt").open()
    end,
  },
  new = {
    desc = "start a new session",
    run = function()
      require("mia.chat").new_session()
    end,
  },
  mode = {
    desc = "show or switch the mode: :Mia mode {id} (an external agent's settings: :Mia mode {setting} {value})",
    run = function(args)
      require("mia.slash").dispatch("/mode " .. args)
    end,
  },
  context = {
    desc = "what the next request carries (system prompt, rules, tools, history, prompt): tokens, % of the context window, price",
    run = function()
      require("mia.context").open()
    end,
  },
  tools = {
    desc = "list every registered tool, grouped by source (the mode may offer fewer)",
    run = function()
      require("mia.tools.view").show()
    end,
  },
  mcp = {
    desc = "MCP servers: :Mia mcp [server] (state, tools, resources, prompts), :Mia mcp start, :Mia mcp restart {server}",
    run = function(args)
      require("mia.mcp").show(args)
    end,
  },
  sessions = {
    desc = "pick a past session (mia's or an external agent's) and resume it",
    run = function()
      require("mia.sessions").pick()
    end,
  },
  rename = {
    desc = "rename the current session: :Mia rename {title}",
    run = function(args)
      if vim.trim(args) == "" then
        error("mia: usage: :Mia rename {title}", 0)
      end
      require("mia.chat").rename(vim.trim(args))
    end,
  },
  costs = {
    desc = "cost report: session, daily, weekly, model {id}, provider {id}; export {csv|json} [since] [until]",
    run = function(args)
      local words = vim.split(vim.trim(args), "%s+", { trimempty = true })
      local scope = words[1] or "session"
      local query
      if scope == "export" then
        require("mia.costs_export").run(words[2], words[3], words[4], words[5])
        return
      end
      if scope == "model" or scope == "provider" then
        if not words[2] then
          error("mia: usage: :Mia costs " .. scope .. " {id}", 0)
        end
        query = vim.tbl_extend("force", { scope = "days", days = 30 }, M.model_filter(scope, words[2]))
      elseif scope == "session" or scope == "daily" or scope == "weekly" then
        query = { scope = scope }
      else
        error("mia: unknown cost report `" .. scope .. "`. Use session, daily, weekly, model {id}, provider {id} or export {csv|json}", 0)
      end
      -- The report is read off the editor's thread; it is printed when it
      -- arrives (nothing waits for it here).
      local costs = require("mia.costs")
      local title = table.concat(words, " ")
      costs.fetch(query, function(err, report)
        if err then
          vim.notify("mia: cost report failed: " .. tostring(err.message or err), vim.log.levels.ERROR)
          return
        end
        report.title = title
        vim.api.nvim_echo({ { table.concat(costs.lines(report), "\n") } }, true, {})
      end)
    end,
  },
  clear = {
    desc = "clear the chat and forget the conversation",
    run = function()
      require("mia.chat").clear()
    end,
  },
  checkpoints = {
    desc = "list the session's turns with the files each changed",
    run = function()
      require("mia.review").checkpoints()
    end,
  },
  undo = {
    desc = "restore the files of the session's last turn (again: undo the restore)",
    run = function()
      require("mia.review").undo()
    end,
  },
  review = {
    desc = "pending hunks: :Mia review accept|reject|accept_all|reject_all|list",
    run = function(args)
      local action = vim.trim(args)
      local actions = require("mia.review").actions
      if action == "" then
        action = "list"
      end
      if not actions[action] then
        error("mia: usage: :Mia review accept|reject|accept_all|reject_all|list (got `" .. action .. "`)", 0)
      end
      actions[action]()
    end,
  },
  install = {
    desc = "download the verified prebuilt native library of this version (or build it with cargo): |mia-install|",
    run = function()
      local install = require("mia.install")
      local function echo(msg)
        vim.api.nvim_echo({ { "mia: " .. msg } }, false, {})
      end
      install.run({
        on_progress = echo,
        on_done = function(err, stamp)
          if err then
            vim.notify(err, vim.log.levels.ERROR)
            return
          end
          local core = require("mia.core")
          local what = "mia: installed " .. install.describe(stamp)
          if core.is_loaded() then
            vim.notify(what .. ". Restart Neovim to use it.", vim.log.levels.INFO)
          else
            core.reset_failure()
            vim.notify(what .. ".", vim.log.levels.INFO)
          end
        end,
      })
    end,
  },
  health = {
    desc = "run :checkhealth mia (`:Mia health online` also asks each provider)",
    run = function(args)
      local health = require("mia.health")
      health.online = vim.trim(args) == "online"
      vim.cmd("checkhealth mia")
      health.online = false
    end,
  },
}

--- Runs `:Mia` with the command's `opts` (from nvim_create_user_command).
function M.run(opts)
  local name, rest = (opts.args or ""):match("^%s*(%S*)%s*(.-)%s*$")
  if name == "" then
    name = "open"
  end
  local sub = M.subcommands[name]
  if not sub then
    local names = vim.tbl_keys(M.subcommands)
    table.sort(names)
    vim.notify(
      string.format("mia: unknown subcommand `%s`. Available: %s", name, table.concat(names, ", ")),
      vim.log.levels.ERROR
    )
    return
  end
  local ok, err = pcall(sub.run, rest, opts)
  if not ok then
    vim.notify(tostring(err), vim.log.levels.ERROR)
  end
end

return M
