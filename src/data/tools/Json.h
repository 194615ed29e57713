#pragma once
// A small strict JSON reader for the JSON-lines converters (`megabatch data graphs`): one JSON
// text per line, parsed into a tree. RFC 8259, plus the NaN / Infinity / -Infinity literals that
// Python's json.dumps writes by default (so a converter can name them as non-finite values
// instead of calling the line unreadable). Errors carry the 1-based column.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mb::json {

struct Value {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  bool integral = false;     // a number written without fraction or exponent ("17")
  std::int64_t integer = 0;  // its value when integral and within int64
  std::string text;          // kString
  std::vector<Value> items;  // kArray
  std::vector<std::pair<std::string, Value>> members;  // kObject, in the order written

  bool isNumber() const { return type == Type::kNumber; }
  bool isInteger() const { return type == Type::kNumber && integral; }
  bool isString() const { return type == Type::kString; }
  bool isArray() const { return type == Type::kArray; }
  bool isObject() const { return type == Type::kObject; }
  // The member `key` of an object (the last one if written twice), or nullptr.
  const Value* find(const std::string& key) const;
  // "a string", "an array of 3", ... for messages.
  std::string describe() const;
};

class ParseError : public std::runtime_error {
 public:
  ParseError(std::size_t column, const std::string& message)
      : std::runtime_error(message), column_(column) {}
  std::size_t column() const { return column_; }  // 1-based

 private:
  std::size_t column_;
};

// The one JSON value in `text` (surrounding whitespace allowed). Throws ParseError.
Value parse(std::string_view text);

}  // namespace mb::json
