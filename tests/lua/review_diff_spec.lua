-- The review's diff and hunk math (lua/mia/review.lua).
local review = require("mia.review")
local expect = require("expect")

return {
  {
    "a whole-file text splits into its lines, the final newline ending the last",
    function()
      expect.eq(review.lines_of(""), {})
      expect.eq(review.lines_of("a\nb\n"), { "a", "b" })
      expect.eq(review.lines_of("a\nb"), { "a", "b" })
      expect.eq(review.lines_of("\n"), { "" })
    end,
  },
  {
    "hunks are 1-based regions, a count of 0 meaning after the start line",
    function()
      expect.eq(review.hunks("a\nb\nc\n", "a\nB\nc\n"), { { 2, 1, 2, 1 } }, "one changed line")
      expect.eq(review.hunks("a\nc\n", "a\nb\nc\n"), { { 1, 0, 2, 1 } }, "an added line")
      expect.eq(review.hunks("a\nb\nc\n", "a\nc\n"), { { 2, 1, 1, 0 } }, "a removed line")
      expect.eq(review.hunks("", "x\n"), { { 0, 0, 1, 1 } }, "a new file")
      -- a missing final newline is not a change of the line
      expect.eq(review.hunks("a\nb", "a\nb\n"), {})
    end,
  },
  {
    "word ranges mark what differs, not the spaces around it",
    function()
      local a, b = review.word_ranges("local x = 1", "local y = 1")
      expect.eq(a, { { 6, 7 } })
      expect.eq(b, { { 6, 7 } })
      a, b = review.word_ranges("abc", "abc")
      expect.eq({ a, b }, { {}, {} })
      -- a multibyte character is one unit
      a, b = review.word_ranges("café au lait", "cafe au lait")
      expect.eq(a, { { 0, 5 } })
      expect.eq(b, { { 0, 4 } })
    end,
  },
  {
    "a very long line's ranges are its changed middle",
    function()
      local long = string.rep("x", 20000)
      local a, b = review.word_ranges(long .. "A" .. long, long .. "BB" .. long)
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
      local d = review.unified("f.txt", old, new)
      expect.eq(d.lines[1], "f.txt")
      assert(vim.tbl_contains(d.lines, "-2") and vim.tbl_contains(d.lines, "+two"), vim.inspect(d.lines))
      assert(vim.tbl_contains(d.lines, "-9") and vim.tbl_contains(d.lines, "+nine"), vim.inspect(d.lines))
      assert(#d.hunk_rows >= 1, "at least one @@ row")
      for _, row in ipairs(d.hunk_rows) do
        assert(d.lines[row + 1]:match("^@@ %-%d+,?%d* %+%d+,?%d* @@"), d.lines[row + 1])
      end
      local created = review.unified("new.txt", nil, "x\n")
      expect.eq(created.lines[1], "new.txt (new file)")
      assert(vim.tbl_contains(created.lines, "+x"), vim.inspect(created.lines))
    end,
  },
}
