#include "ir/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace loom::ir {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

char CloserOf(char open) {
  switch (open) {
    case '{':
      return '}';
    case '[':
      return ']';
    default:
      return ')';
  }
}

bool IsOpener(char c) { return c == '{' || c == '[' || c == '('; }
bool IsCloser(char c) { return c == '}' || c == ']' || c == ')'; }

// Appends one space unless `out` is empty or already ends in a space or an
// opener (folds whitespace runs).
void AppendFoldedSpace(std::string& out) {
  if (!out.empty() && out.back() != ' ' && !IsOpener(out.back())) out += ' ';
}

}  // namespace

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

Lexer::Lexer(std::string_view text) : text_(text) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < text_.size(); ++i) {
    if (text_[i] == '\n') line_starts_.push_back(i + 1);
  }
}

SourceLoc Lexer::LocAt(size_t offset) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const size_t line = static_cast<size_t>(it - line_starts_.begin());
  return SourceLoc{static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
}

bool Lexer::SkipComment() {
  if (pos_ + 1 >= text_.size() || text_[pos_] != '/') return false;
  if (text_[pos_ + 1] == '/') {
    while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    return true;
  }
  if (text_[pos_ + 1] == '*') {
    const size_t end = text_.find("*/", pos_ + 2);
    if (end == std::string_view::npos) {
      if (!error_) error_ = Error{"unterminated /* comment", LocAt(pos_)};
      pos_ = text_.size();
    } else {
      pos_ = end + 2;
    }
    return true;
  }
  return false;
}

void Lexer::SkipTrivia() {
  while (pos_ < text_.size()) {
    if (IsSpace(text_[pos_])) {
      ++pos_;
    } else if (!SkipComment()) {
      return;
    }
  }
}

bool Lexer::AtEnd() {
  SkipTrivia();
  return pos_ >= text_.size();
}

char Lexer::Peek() {
  SkipTrivia();
  return pos_ < text_.size() ? text_[pos_] : '\0';
}

bool Lexer::TryConsume(char c) {
  if (Peek() != c) return false;
  ++pos_;
  return true;
}

bool Lexer::TryConsume(std::string_view literal) {
  SkipTrivia();
  if (text_.substr(pos_, literal.size()) != literal) return false;
  pos_ += literal.size();
  return true;
}

std::string_view Lexer::PeekWord() {
  SkipTrivia();
  size_t end = pos_;
  if (end < text_.size() && text_[end] == '%') ++end;
  while (end < text_.size() && IsWordChar(text_[end])) ++end;
  return text_.substr(pos_, end - pos_);
}

std::string_view Lexer::ReadWord() {
  const std::string_view word = PeekWord();
  pos_ += word.size();
  return word;
}

std::string_view Lexer::ReadName() {
  std::string_view word = ReadWord();
  if (!word.empty() && word.front() == '%') word.remove_prefix(1);
  return word;
}

std::optional<int64_t> Lexer::ReadInt() {
  SkipTrivia();
  int64_t value = 0;
  const char* begin = text_.data() + pos_;
  const char* end = text_.data() + text_.size();
  auto [next, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || (next < end && IsWordChar(*next) && *next != '-' && *next != '.')) {
    return std::nullopt;
  }
  pos_ += static_cast<size_t>(next - begin);
  return value;
}

Status Lexer::AppendString(std::string& out) {
  const size_t start = pos_;
  out += text_[pos_++];
  while (pos_ < text_.size()) {
    const char c = text_[pos_++];
    out += c;
    if (c == '\\' && pos_ < text_.size()) {
      out += text_[pos_++];
    } else if (c == '"') {
      return OkStatus();
    }
  }
  return Error{"unterminated string", LocAt(start)};
}

Expected<std::string> Lexer::ReadQuotedString() {
  SkipTrivia();
  std::string out;
  if (pos_ >= text_.size() || text_[pos_] != '"') {
    return Error{"expected a quoted string", Loc()};
  }
  LOOM_RETURN_IF_ERROR(AppendString(out));
  return out;
}

Status Lexer::AppendGroup(std::string& out) {
  // An explicit stack of expected closers: attribute values nest arbitrarily
  // deep in hostile input, so no recursion.
  std::vector<std::pair<char, size_t>> closers;
  closers.push_back({CloserOf(text_[pos_]), pos_});
  out += text_[pos_++];
  while (!closers.empty()) {
    if (pos_ >= text_.size()) {
      return Error{fmt::format("missing '{}' to close the '{}' opened here", closers.back().first,
                               text_[closers.back().second]),
                   LocAt(closers.back().second)};
    }
    const char c = text_[pos_];
    if (c == '"') {
      LOOM_RETURN_IF_ERROR(AppendString(out));
    } else if (IsSpace(c)) {
      AppendFoldedSpace(out);
      ++pos_;
    } else if (c == '/' && SkipComment()) {
      if (error_) return *error_;
    } else if (IsOpener(c)) {
      closers.push_back({CloserOf(c), pos_});
      out += c;
      ++pos_;
    } else if (IsCloser(c)) {
      if (c != closers.back().first) {
        return Error{fmt::format("mismatched '{}': expected '{}'", c, closers.back().first),
                     LocAt(pos_)};
      }
      if (!out.empty() && out.back() == ' ') out.pop_back();
      closers.pop_back();
      out += c;
      ++pos_;
    } else {
      out += c;
      ++pos_;
    }
  }
  return OkStatus();
}

Expected<std::string> Lexer::ReadRawValue() {
  SkipTrivia();
  std::string out;
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (IsSpace(c) || c == ',' || IsCloser(c)) break;
    if (c == '/' && pos_ + 1 < text_.size() && (text_[pos_ + 1] == '/' || text_[pos_ + 1] == '*')) {
      break;
    }
    if (c == '"') {
      LOOM_RETURN_IF_ERROR(AppendString(out));
    } else if (IsOpener(c)) {
      LOOM_RETURN_IF_ERROR(AppendGroup(out));
    } else {
      out += c;
      ++pos_;
    }
  }
  if (out.empty()) return Error{"expected an attribute value", Loc()};
  return out;
}

Expected<std::string> Lexer::ReadBalancedUntil(char close) {
  // Re-use AppendGroup by scanning from the opener just before pos_.
  const size_t opener = pos_ - 1;
  if (pos_ == 0 || CloserOf(text_[opener]) != close) {
    return Error{fmt::format("expected '{}'", close), Loc()};
  }
  pos_ = opener;
  std::string group;
  LOOM_RETURN_IF_ERROR(AppendGroup(group));
  std::string contents = group.substr(1, group.size() - 2);
  if (!contents.empty() && contents.front() == ' ') contents.erase(0, 1);
  return contents;
}

std::string_view Lexer::ReadRestOfLine() {
  const size_t start = pos_;
  size_t end = text_.find('\n', pos_);
  if (end == std::string_view::npos) end = text_.size();
  pos_ = end < text_.size() ? end + 1 : end;
  std::string_view line = text_.substr(start, end - start);
  while (!line.empty() && IsSpace(line.back())) line.remove_suffix(1);
  while (!line.empty() && IsSpace(line.front())) line.remove_prefix(1);
  return line;
}

}  // namespace loom::ir
