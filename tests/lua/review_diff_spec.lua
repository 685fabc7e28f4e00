-- The review's diff and hunk math (lua/mia/review/diff.lua): pure, so
-- required alone.
local diff = require("mia.review.diff")
local expect = require("expect")

return {
  {
    "a whole-file text splits into its lines, the final newline ending the last",
    function()
      expect.eq(diff.lines_of(""), {})
      expect.eq(diff.lines_of("a\nb\n"), { "a", "b" })
      expect.eq(diff.lines_of("a\nb"), { "a", "b" })
      expect.eq(diff.lines_of("\n"), { "" })
    end,
  },
  {
    "hunks are 1-based regions, a count of 0 meaning after the start line",
    function()
      expect.eq(diff.hunks("a\nb\nc\n", "a\nB\nc\n"), { { 2, 1, 2, 1 } }, "one changed line")
      expect.eq(diff.hunks("a\nc\n", "a\nb\nc\n"), { { 1, 0, 2, 1 } }, "an added line")
      expect.eq(diff.hunks("a\nb\nc\n", "a\nc\n"), { { 2, 1, 1, 0 } }, "a removed line")
      expect.eq(diff.hunks("", "x\n"), { { 0, 0, 1, 1 } }, "a new file")
      -- a missing final newline is not a change of the line
      expect.eq(diff.hunks("a\nb", "a\nb\n"), {})
    end,
  },
  {
    "word ranges mark what differs, not the spaces around it",
    function()
      local a, b = diff.word_ranges("local x = 1", "local y = 1")
      expect.eq(a, { { 6, 7 } })
      expect.eq(b, { { 6, 7 } })
      a, b = diff.word_ranges("abc", "abc")
      expect.eq({ a, b }, { {}, {} })
      -- a multibyte character is one unit
      a, b = diff.word_ranges("café au lait", "cafe au lait")
      expect.eq(a, { { 0, 5 } })
      expect.eq(b, { { 0, 4 } })
    end,
  },
  {
    "a very long line's ranges are its changed middle",
    function()
      local long = string.rep("x", 20000)
      local a, b = diff.word_ranges(long .. "A" .. long, long .. "BB" .. long)
      expect.eq(a, { { 20000, 20001 } })
      expect.eq(b, { { 20000, 20002 } })
    end,
  },
  {
    "the unified diff has a header, one @@ row per group and the changed lines",
    function()
      local old = table.concat({ "1", "2", "3", "4", "5", "6", "7", "8", "9", "10" }, "\n") .. "\n"
      local new = old:gsub("^2\n", "two\n"):gsub("\n9\n", "\nnine\n")
      new = ("1\n" .. new:sub(3)):gsub("\n2\n", "\ntwo\n")
      local d = diff.unified("f.txt", old, new)
      expect.eq(d.lines[1], "f.txt")
      assert(vim.tbl_contains(d.lines, "-2") and vim.tbl_contains(d.lines, "+two"), vim.inspect(d.lines))
      assert(vim.tbl_contains(d.lines, "-9") and vim.tbl_contains(d.lines, "+nine"), vim.inspect(d.lines))
      assert(#d.hunk_rows >= 1, "at least one @@ row")
      for _, row in ipairs(d.hunk_rows) do
        assert(d.lines[row + 1]:match("^@@ %-%d+,?%d* %+%d+,?%d* @@"), d.lines[row + 1])
      end
      local created = diff.unified("new.txt", nil, "x\n")
      expect.eq(created.lines[1], "new.txt (new file)")
      assert(vim.tbl_contains(created.lines, "+x"), vim.inspect(created.lines))
    end,
  },
  {
    "a change shows with three lines of context, the @@ row counting both sides",
    function()
      local old = table.concat({ "1", "2", "3", "4", "5", "6", "7", "8", "9", "10" }, "\n") .. "\n"
      local d = diff.unified("f.txt", old, (old:gsub("\n5\n", "\nfive\n")))
      expect.eq(d.lines, { "f.txt", "@@ -2,7 +2,7 @@", " 2", " 3", " 4", "-5", "+five", " 6", " 7", " 8" })
      expect.eq(d.hunk_rows, { 1 })
      expect.eq(d.line_hl, { [0] = "Title", [1] = "DiffChange", [5] = "DiffDelete", [6] = "DiffAdd" })
      -- the paired lines' words, shifted past the -/+ column
      expect.eq(d.words, { { 5, 1, 2 }, { 6, 1, 5 } })
    end,
  },
  {
    "changes whose context touches share one @@ group; later groups count the lines added before",
    function()
      local nums = {}
      for i = 1, 20 do
        nums[i] = tostring(i)
      end
      local old = table.concat(nums, "\n") .. "\n"
      local near = diff.unified("f", old, (old:gsub("\n2\n", "\ntwo\n"):gsub("\n8\n", "\neight\n")))
      expect.eq(near.hunk_rows, { 1 }, "one group")
      expect.eq(near.lines[2], "@@ -1,11 +1,11 @@")
      local new = old:gsub("\n2\n", "\n2\nnew\n", 1):gsub("\n18\n", "\neighteen\n")
      local far = diff.unified("f", old, new)
      expect.eq(far.lines, {
        "f",
        "@@ -1,5 +1,6 @@",
        " 1",
        " 2",
        "+new",
        " 3",
        " 4",
        " 5",
        "@@ -15,6 +16,6 @@",
        " 15",
        " 16",
        " 17",
        "-18",
        "+eighteen",
        " 19",
        " 20",
      })
      expect.eq(far.hunk_rows, { 1, 8 })
    end,
  },
  {
    "a new file is all added lines from -0,0",
    function()
      local d = diff.unified("new.txt", nil, "a\nb\n")
      expect.eq(d.lines, { "new.txt (new file)", "@@ -0,0 +1,2 @@", "+a", "+b" })
      -- an empty old file is not a new one
      expect.eq(diff.unified("empty.txt", "", "a\n").lines, { "empty.txt", "@@ -0,0 +1,1 @@", "+a" })
    end,
  },
  {
    "deleted lines show with their context; deleting everything ends at +0,0",
    function()
      expect.eq(diff.unified("f", "a\nb\nc\n", "a\nc\n").lines, { "f", "@@ -1,3 +1,2 @@", " a", "-b", " c" })
      local gone = diff.unified("f", "a\nb\n", "")
      expect.eq(gone.lines, { "f", "@@ -1,2 +0,0 @@", "-a", "-b" })
      expect.eq(gone.words, {}, "no pairs: no word highlights")
    end,
  },
  {
    "notes show under the path as warnings, before the first @@ row",
    function()
      local d = diff.unified("f", "a\n", "b\n", { "note one", "note two" })
      expect.eq(d.lines, { "f", "note one", "note two", "@@ -1,1 +1,1 @@", "-a", "+b" })
      expect.eq(d.hunk_rows, { 3 })
      expect.eq({ d.line_hl[1], d.line_hl[2], d.line_hl[3] }, { "WarningMsg", "WarningMsg", "DiffChange" })
    end,
  },
  {
    "a final newline added or removed is said, not shown as a changed line",
    function()
      local added = diff.unified("f", "a\nb", "a\nb\n")
      expect.eq(added.lines, { "f", "\\ the final newline is added" })
      expect.eq(added.line_hl[1], "Comment")
      expect.eq(diff.unified("f", "a\n", "a").lines, { "f", "\\ No newline at end of file (removed)" })
      -- both without one: nothing to say
      expect.eq(diff.unified("f", "a\nb", "a\nc").lines, { "f", "@@ -1,2 +1,2 @@", " a", "-b", "+c" })
      expect.eq(diff.unified("f", "a\n", "a\n").lines, { "f", "(no change)" })
    end,
  },
  {
    "word highlights stop after 2000 paired lines",
    function()
      local old, new = {}, {}
      for i = 1, 2001 do
        old[i], new[i] = "x" .. i, "y" .. i
      end
      local d = diff.unified("f", table.concat(old, "\n") .. "\n", table.concat(new, "\n") .. "\n")
      expect.eq(#d.words, 4000, "one range on each side of the first 2000 pairs")
      expect.eq(#d.lines, 2 + 2 * 2001)
    end,
  },
  {
    "the accepted hunks alone make the text that lands",
    function()
      local old, new = "a\nb\nc\n", "A\nb\nC\n"
      local h = diff.hunks(old, new)
      expect.eq(#h, 2)
      expect.eq(diff.apply(old, new, { h[1] }), "A\nb\nc\n", "the first")
      expect.eq(diff.apply(old, new, { h[2] }), "a\nb\nC\n", "the second")
      expect.eq(diff.apply(old, new, h), new, "both")
      expect.eq(diff.apply(old, new, {}), old, "none")
      expect.eq(diff.apply("a\nc\n", "a\nb\nc\n", diff.hunks("a\nc\n", "a\nb\nc\n")), "a\nb\nc\n", "an insertion")
      expect.eq(diff.apply("b\n", "a\nb\n", diff.hunks("b\n", "a\nb\n")), "a\nb\n", "an insertion at the top")
      expect.eq(diff.apply("a\nb\nc\n", "a\nc\n", diff.hunks("a\nb\nc\n", "a\nc\n")), "a\nc\n", "a deletion")
      expect.eq(diff.apply("a\n", "", diff.hunks("a\n", "")), "", "everything deleted")
    end,
  },
  {
    "the accepted hunks keep the old text's final newline, a new file the new text's",
    function()
      expect.eq(diff.apply("a\nb", "A\nb\n", diff.hunks("a\nb", "A\nb\n")), "A\nb")
      expect.eq(diff.apply("a\nb\n", "A\nb", diff.hunks("a\nb\n", "A\nb")), "A\nb\n")
      expect.eq(diff.apply("", "x\ny", diff.hunks("", "x\ny")), "x\ny")
      expect.eq(diff.apply("", "x\n", diff.hunks("", "x\n")), "x\n")
    end,
  },
  {
    "the hunk at a row is the one covering it, else the nearest, the first of equals",
    function()
      -- rows 2-4; an insertion before row 10; row 20
      local spans = { { 2, 3 }, { 10, 0 }, { 20, 1 } }
      expect.eq(diff.nearest(spans, 3), 1, "covered")
      expect.eq(diff.nearest(spans, 10), 2, "an insertion covers its row")
      expect.eq(diff.nearest(spans, 0), 1, "above all")
      expect.eq(diff.nearest(spans, 25), 3, "below all")
      expect.eq(diff.nearest(spans, 8), 2, "nearer the second")
      expect.eq(diff.nearest(spans, 7), 1, "as near to both")
      expect.eq(diff.nearest({}, 3), nil)
    end,
  },
  {
    "the next and previous hunk rows stop at the ends or wrap around",
    function()
      local rows = { 1, 5, 9 }
      expect.eq(diff.step(rows, 5, 1), 9)
      expect.eq(diff.step(rows, 6, -1), 5)
      expect.eq(diff.step(rows, 0, 1), 1)
      expect.eq(diff.step(rows, 9, 1), nil, "past the last")
      expect.eq(diff.step(rows, 9, 1, true), 1, "wraps to the first")
      expect.eq(diff.step(rows, 1, -1), nil, "before the first")
      expect.eq(diff.step(rows, 1, -1, true), 9, "wraps to the last")
      expect.eq(diff.step({}, 0, 1, true), nil)
    end,
  },
  {
    "an edit review is a permission request whose tool call carries a diff",
    function()
      local d = { type = "diff", path = "p", oldText = "a", newText = "b" }
      expect.eq(diff.diff_of({ toolCall = { content = { { type = "content" }, d } } }), d)
      expect.eq(diff.diff_of({ toolCall = { content = { { type = "diff", path = "p" } } } }), nil, "no new text")
      expect.eq(diff.diff_of({ toolCall = {} }), nil)
      expect.eq(diff.diff_of("x"), nil)
      expect.eq(diff.meta_of({ _meta = { mia = { tool = "t" } } }), { tool = "t" })
      expect.eq(diff.meta_of({ _meta = { other = 1 } }), {})
      expect.eq(diff.meta_of({}), {})
    end,
  },
}
