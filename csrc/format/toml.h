// The TOML subset that `.model` sections use (grammar: docs/toml-subset.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cyb::toml {

class Value {
 public:
  enum class Type { Null, Bool, Int, Float, String, Array, Table };
  using Array = std::vector<Value>;
  using Table = std::vector<std::pair<std::string, Value>>;  // insertion order kept

  Value() = default;
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double d);
  static Value string(std::string s);
  static Value array();
  static Value table();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_table() const { return type_ == Type::Table; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_string() const { return type_ == Type::String; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float; }
  bool is_bool() const { return type_ == Type::Bool; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_float() const { return type_ == Type::Int ? static_cast<double>(i_) : d_; }
  const std::string& as_string() const { return s_; }
  const Array& as_array() const { return a_; }
  Array& as_array() { return a_; }
  const Table& as_table() const { return t_; }
  Table& as_table() { return t_; }

  // Table lookup; nullptr when absent or when this is not a table.
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  // Dotted path lookup ("architecture.hidden_size").
  const Value* find_path(std::string_view dotted) const;

 private:
  Type type_ = Type::Null;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0.0;
  std::string s_;
  Array a_;
  Table t_;
};

// Parses a TOML document; throws cyb::Error (Format) naming `section`, the
// line and the reason on malformed input. Never reads out of bounds; nesting
// depth is bounded.
Value parse(std::string_view text, const std::string& section);

// Offset of the first byte of `s` that is not valid UTF-8 (overlong forms and
// surrogates included), or std::string_view::npos when all of it is valid.
size_t invalid_utf8_offset(std::string_view s);

}  // namespace cyb::toml
