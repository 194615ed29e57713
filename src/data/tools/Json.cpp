#include "data/tools/Json.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace mb::json {
namespace {

constexpr int kMaxDepth = 64;  // deeper nesting is refused (no graph needs it; bounds the stack)

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Value document() {
    skipSpace();
    Value value = parseValue(0);
    skipSpace();
    if (pos_ < text_.size())
      fail("unexpected '" + std::string(1, text_[pos_]) + "' after the value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { throw ParseError(pos_ + 1, message); }

  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value parseValue(int depth) {
    if (depth > kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (pos_ >= text_.size()) fail("unexpected end of line (a value is missing)");
    Value value;
    char c = text_[pos_];
    if (c == '{') return parseObject(depth);
    if (c == '[') return parseArray(depth);
    if (c == '"') {
      value.type = Value::Type::kString;
      value.text = parseString();
      return value;
    }
    if (consume("true") || consume("false")) {
      value.type = Value::Type::kBool;
      value.boolean = text_.substr(pos_ - 4, 4) == "true";
      return value;
    }
    if (consume("null")) return value;
    if (c == '-' || (c >= '0' && c <= '9') || c == 'N' || c == 'I') return parseNumber();
    fail("unexpected '" + std::string(1, c) + "' (expected a value)");
  }

  Value parseObject(int depth) {
    Value value;
    value.type = Value::Type::kObject;
    ++pos_;  // {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return value;
    }
    while (true) {
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a quoted key");
      std::string key = parseString();
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':')
        fail("expected ':' after key \"" + key + "\"");
      ++pos_;
      skipSpace();
      value.members.emplace_back(std::move(key), parseValue(depth + 1));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return value;
      }
      fail(pos_ >= text_.size() ? "unexpected end of line inside an object (missing '}')"
                                : "expected ',' or '}' in an object");
    }
  }

  Value parseArray(int depth) {
    Value value;
    value.type = Value::Type::kArray;
    ++pos_;  // [
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return value;
    }
    while (true) {
      skipSpace();
      value.items.push_back(parseValue(depth + 1));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return value;
      }
      fail(pos_ >= text_.size() ? "unexpected end of line inside an array (missing ']')"
                                : "expected ',' or ']' in an array");
    }
  }

  void appendUtf8(std::string& out, std::uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  std::uint32_t hex4() {
    if (pos_ + 4 > text_.size()) fail("a \\u escape needs 4 hex digits");
    std::uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9') {
        code |= static_cast<std::uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        code |= static_cast<std::uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        code |= static_cast<std::uint32_t>(h - 'A' + 10);
      } else {
        fail("a \\u escape needs 4 hex digits");
      }
    }
    return code;
  }

  std::string parseString() {
    ++pos_;  // "
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string (missing '\"')");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape in a string");
      char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          std::uint32_t code = hex4();
          if (code >= 0xD800 && code < 0xDC00 && consume("\\u")) {
            std::uint32_t low = hex4();
            if (low >= 0xDC00 && low < 0xE000)
              code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          appendUtf8(out, code);
          break;
        }
        default:
          --pos_;
          fail("unknown escape '\\" + std::string(1, e) + "' in a string");
      }
    }
  }

  Value parseNumber() {
    Value value;
    value.type = Value::Type::kNumber;
    if (consume("NaN")) {
      value.number = std::numeric_limits<double>::quiet_NaN();
      return value;
    }
    if (consume("Infinity")) {
      value.number = std::numeric_limits<double>::infinity();
      return value;
    }
    if (consume("-Infinity")) {
      value.number = -std::numeric_limits<double>::infinity();
      return value;
    }
    const std::size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    auto digits = [&] {
      std::size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        ++pos_;
      return pos_ - from;
    };
    std::size_t whole = digits();
    if (whole == 0) fail("a number needs digits");
    if (whole > 1 && text_[start + (text_[start] == '-')] == '0') fail("a number has a leading 0");
    bool integral = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) fail("a number needs digits after '.'");
      integral = false;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("a number needs digits in its exponent");
      integral = false;
    }
    std::string literal(text_.substr(start, pos_ - start));
    value.number = std::strtod(literal.c_str(), nullptr);
    if (integral) {
      errno = 0;
      long long parsed = std::strtoll(literal.c_str(), nullptr, 10);
      value.integral = errno != ERANGE;
      value.integer = parsed;
    }
    return value;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

const Value* Value::find(const std::string& key) const {
  const Value* found = nullptr;
  for (const auto& [name, value] : members) {
    if (name == key) found = &value;
  }
  return found;
}

std::string Value::describe() const {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return boolean ? "true" : "false";
    case Type::kNumber:
      return integral ? std::to_string(integer) : "a number";
    case Type::kString:
      return "a string";
    case Type::kArray:
      return "an array of " + std::to_string(items.size());
    case Type::kObject:
      return "an object";
  }
  return "?";
}

Value parse(std::string_view text) {
  return Parser(text).document();
}

}  // namespace mb::json
