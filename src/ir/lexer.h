// Character-level scanning of HLO text for the parser: trivia (whitespace,
// `//` and `/* */` comments), words, integers, and the raw text of attribute
// values Loom keeps verbatim. Locations are computed on demand from offsets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace loom::ir {

class Lexer {
 public:
  explicit Lexer(std::string_view text);

  // Skips whitespace and comments. An unterminated `/*` is remembered as an
  // error (see error()) and skips to the end.
  void SkipTrivia();

  bool AtEnd();
  char Peek();  // after trivia; '\0' at the end
  // The very next character, trivia included; '\0' at the end.
  char PeekImmediate() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool TryConsume(char c);
  bool TryConsume(std::string_view literal);
  // The word (letters, digits, `_`, `.`, `-`, and a leading `%`) at the
  // current position, without consuming it.
  std::string_view PeekWord();
  std::string_view ReadWord();
  // A name: a word with its leading `%` removed.
  std::string_view ReadName();
  std::optional<int64_t> ReadInt();
  // A quoted string with its quotes and escapes, verbatim.
  Expected<std::string> ReadQuotedString();
  // An attribute value kept verbatim: a run of balanced `{}`, `[]`, `()`
  // groups, strings and plain characters up to a top-level `,`, whitespace,
  // or unmatched closer. Comments are dropped and whitespace inside groups is
  // folded to single spaces, so the text prints back stably.
  Expected<std::string> ReadRawValue();
  // The text between `open` (already consumed) and its matching `close`,
  // which is consumed; comments dropped, whitespace folded.
  Expected<std::string> ReadBalancedUntil(char close);
  // The rest of the current line, trimmed, and the line break.
  std::string_view ReadRestOfLine();

  size_t offset() const { return pos_; }
  // Moves back (or forward) to an offset seen before, for one-token lookahead.
  void Rewind(size_t offset) { pos_ = offset; }
  // The location of the next token (trivia skipped).
  SourceLoc Loc() {
    SkipTrivia();
    return LocAt(pos_);
  }
  SourceLoc LocAt(size_t offset) const;
  SourceLoc EndLoc() const { return LocAt(text_.size()); }
  const std::optional<Error>& error() const { return error_; }

 private:
  // Appends balanced text starting at pos_ to `out` until depth returns to
  // zero; used by ReadRawValue and ReadBalancedUntil.
  Status AppendGroup(std::string& out);
  Status AppendString(std::string& out);
  bool SkipComment();  // at '/': skips one comment; false if none

  std::string_view text_;
  size_t pos_ = 0;
  std::vector<size_t> line_starts_;
  std::optional<Error> error_;
};

bool IsWordChar(char c);

}  // namespace loom::ir
