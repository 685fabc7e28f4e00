" The chat buffer's highlighting (|mia-chat-syntax|): the markdown a chat
" shows (headings, fenced and inline code, emphasis, lists, quotes, links)
" with a few cheap patterns. Vim's full markdown syntax re-reads a whole
" line on every change through dozens of look-around patterns, which costs
" milliseconds per frame on a long streamed paragraph; these cost about as
" much as no syntax at all. `chat = { syntax = "markdown" }` brings the full
" one back.

if exists('b:current_syntax')
  finish
endif

syn case match
syn sync minlines=50

syn match miaChatHeading /^#\{1,6} .*$/ contains=@NoSpell
syn match miaChatRule /^\s*\%(-\s*\)\{3,}$/
syn match miaChatListMarker /^\s*\%([-*+]\|\d\+[.)]\)\ze\s/
syn match miaChatQuote /^>.*$/
syn region miaChatCode matchgroup=miaChatCodeDelimiter start=/`/ end=/`/ oneline keepend contains=@NoSpell
syn region miaChatBold matchgroup=miaChatBoldDelimiter start=/\*\*\ze\S/ end=/\S\zs\*\*/ oneline keepend contains=miaChatCode
" Italics in two regions, one per delimiter: each start then begins with a
" literal character, which the regex engine finds with a byte search. One
" pattern for both (`\<_\|\*`) has no first character, and searching it
" over a long streamed line was most of this file's cost per frame.
syn region miaChatItalic matchgroup=miaChatItalicDelimiter start=/\<_\ze\S/ end=/\S\zs_\>/ oneline keepend contains=miaChatCode
syn region miaChatItalic matchgroup=miaChatItalicDelimiter start=/\*\ze[^* \t]/ end=/[^* \t]\zs\*/ oneline keepend contains=miaChatCode
syn match miaChatLink /\[[^\]]*\]([^)]*)/ contains=@NoSpell

" Fenced blocks; languages named in g:markdown_fenced_languages get their
" own syntax inside, as with Vim's markdown syntax ("js=javascript" form too).
" Those are defined after the plain one, so they win where both start.
syn region miaChatFence matchgroup=miaChatFenceDelimiter start=/^\s*```.*$/ end=/^\s*```\ze\s*$/ keepend contains=@NoSpell
let s:done = {}
for s:entry in get(g:, 'markdown_fenced_languages', [])
  " Only names (`lua`, `js=javascript`): the entry is spliced into commands.
  if type(s:entry) != v:t_string || s:entry !~# '^[A-Za-z0-9_+-]\+\%(=[A-Za-z0-9_.]\+\)\=$'
    continue
  endif
  let s:name = matchstr(s:entry, '[^=]*')
  let s:type = matchstr(s:entry, '[^=]*$')
  let s:group = substitute(s:type, '\.', '', 'g')
  if !has_key(s:done, s:group)
    let s:done[s:group] = 1
    unlet! b:current_syntax
    execute 'syn include @miaChatHighlight_' . s:group . ' syntax/' . s:type . '.vim'
  endif
  execute 'syn region miaChatFence_' . s:group . ' matchgroup=miaChatFenceDelimiter'
        \ . ' start=/^\s*```\s*' . escape(s:name, '/.') . '\>.*$/ end=/^\s*```\ze\s*$/ keepend'
        \ . ' contains=@miaChatHighlight_' . s:group
endfor
unlet! s:done s:entry s:name s:type s:group

hi def link miaChatHeading Title
hi def link miaChatRule PreProc
hi def link miaChatListMarker Statement
hi def link miaChatQuote Comment
hi def link miaChatCode String
hi def link miaChatCodeDelimiter Delimiter
hi def link miaChatFence String
hi def link miaChatFenceDelimiter Delimiter
hi def miaChatBold term=bold cterm=bold gui=bold
hi def link miaChatBoldDelimiter Delimiter
hi def miaChatItalic term=italic cterm=italic gui=italic
hi def link miaChatItalicDelimiter Delimiter
hi def link miaChatLink Underlined

let b:current_syntax = 'mia_chat'
