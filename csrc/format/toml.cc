// The TOML subset of `.model` sections; the grammar is docs/toml-subset.md.
//
// One pass over the text, no recursion except for nested values (bounded by
// kMaxDepth). Every read is checked against the end of the text. Which key
// or table was defined how (by a [header], by dotted keys, inline) is kept in
// a shadow tree of `Node`s (each with a flat hash index of its keys) so that
// redefinitions are rejected the way TOML 1.0 demands, in O(1) per key even
// for vocabularies of 262k tokens.
#include "format/toml.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#if defined(__has_include)
#if __has_include(<charconv>)
#include <charconv>
#endif
#endif

#include "core/errors.h"

namespace cyb::toml {

Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::Int;
  v.i_ = i;
  return v;
}
Value Value::floating(double d) {
  Value v;
  v.type_ = Type::Float;
  v.d_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.type_ = Type::String;
  v.s_ = std::move(s);
  return v;
}
Value Value::array() {
  Value v;
  v.type_ = Type::Array;
  return v;
}
Value Value::table() {
  Value v;
  v.type_ = Type::Table;
  return v;
}

const Value* Value::find(std::string_view key) const {
  if (type_ != Type::Table) return nullptr;
  for (const auto& kv : t_)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

Value* Value::find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Value*>(this)->find(key));
}

const Value* Value::find_path(std::string_view dotted) const {
  const Value* v = this;
  for (;;) {
    size_t dot = dotted.find('.');
    v = v->find(dotted.substr(0, dot));
    if (!v || dot == std::string_view::npos) return v;
    dotted.remove_prefix(dot + 1);
  }
}

namespace {

constexpr int kMaxDepth = 64;              // nested arrays / inline tables; segments of one key
constexpr size_t kMaxValues = 16u << 20;   // values in one document (bounds memory on hostile input)

// How a key came to exist; decides what may later be added to it.
enum class Kind : uint8_t {
  Leaf,          // key = scalar
  Frozen,        // key = [array] or key = {inline table}: closed for good
  Implicit,      // table created as the parent of a [header]
  Header,        // table defined by a [header] (or an element of [[array]])
  Dotted,        // table created by a dotted key (a.b = 1)
  ArrayOfTables  // [[header]]
};

struct Node;

struct Child {
  Kind kind = Kind::Leaf;
  std::unique_ptr<Node> node;  // tables and arrays of tables only
};

// The shadow of one table: what each entry is (`kids`, parallel to the
// table's entry list) and an open-addressing index from key to entry.
struct Node {
  static constexpr size_t npos = static_cast<size_t>(-1);
  std::vector<Child> kids;
  std::vector<uint64_t> slots;  // (hash << 32) | (entry + 1); 0 = empty
  std::vector<std::unique_ptr<Node>> elems;  // ArrayOfTables: one Node per element

  static uint32_t hash(std::string_view key) {
    uint32_t h = 2166136261u;  // FNV-1a
    for (char c : key) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
    return h;
  }

  size_t find(const Value::Table& table, std::string_view key, uint32_t h) const {
    if (slots.empty()) return npos;
    size_t mask = slots.size() - 1;
    for (size_t pos = h & mask;; pos = (pos + 1) & mask) {
      uint64_t s = slots[pos];
      if (s == 0) return npos;
      size_t i = static_cast<size_t>(s & 0xffffffffu) - 1;
      if (static_cast<uint32_t>(s >> 32) == h && table[i].first == key) return i;
    }
  }

  void add_slot(uint32_t h, size_t i) {
    if ((kids.size() + 1) * 2 > slots.size()) {
      std::vector<uint64_t> old;
      old.swap(slots);
      slots.assign(old.empty() ? 8 : old.size() * 2, 0);
      for (uint64_t s : old)
        if (s) place(s);
    }
    place((static_cast<uint64_t>(h) << 32) | static_cast<uint64_t>(i + 1));
  }

 private:
  void place(uint64_t s) {
    size_t mask = slots.size() - 1;
    size_t pos = static_cast<size_t>(s >> 32) & mask;
    while (slots[pos]) pos = (pos + 1) & mask;
    slots[pos] = s;
  }
};

bool is_bare_key_char(int c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

bool is_control(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

size_t invalid_utf8_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

namespace {

std::string join_key(const std::vector<std::string>& segs) {
  std::string out;
  for (size_t i = 0; i < segs.size(); ++i) {
    if (i) out += '.';
    out += segs[i];
  }
  return out;
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& section) : s_(text), section_(section) {}

  Value run() {
    size_t bad = invalid_utf8_offset(s_);
    if (bad != std::string_view::npos) {
      p_ = bad;
      fail("invalid UTF-8");
    }
    Value root = Value::table();
    Node root_node;
    Value* cur = &root;
    Node* cur_node = &root_node;
    for (;;) {
      skip_ws();
      if (eof()) break;
      int c = peek();
      if (c == '#' || c == '\n' || c == '\r') {
        end_of_line();
      } else if (c == '[') {
        header(&root, &root_node, &cur, &cur_node);
        end_of_line();
      } else {
        key_value(cur, cur_node);
        end_of_line();
      }
    }
    return root;
  }

 private:
  std::string_view s_;
  size_t p_ = 0;
  const std::string& section_;
  const std::vector<std::string>* key_segs_ = nullptr;  // the key being parsed, for errors
  std::vector<std::string> segs_;                       // reused by header() and key_value()
  size_t values_ = 0;

  [[noreturn]] void fail(const std::string& reason) const {
    size_t end = p_ < s_.size() ? p_ : s_.size();
    size_t line = 1;
    for (size_t i = 0; i < end; ++i) line += s_[i] == '\n';
    throw_format(section_, key_segs_ ? join_key(*key_segs_) : std::string(),
                 "line " + std::to_string(line) + ": " + reason);
  }

  bool eof() const { return p_ >= s_.size(); }
  int peek(size_t k = 0) const {
    return p_ + k < s_.size() ? static_cast<unsigned char>(s_[p_ + k]) : -1;
  }
  bool starts_with(std::string_view t) const {
    return p_ <= s_.size() && s_.substr(p_).substr(0, t.size()) == t;
  }

  void skip_ws() {
    while (peek() == ' ' || peek() == '\t') ++p_;
  }

  void skip_comment() {
    // p_ is at '#'; the comment runs to the end of the line.
    ++p_;
    while (!eof()) {
      unsigned char c = static_cast<unsigned char>(s_[p_]);
      if (c == '\n' || (c == '\r' && peek(1) == '\n')) return;
      if (is_control(c)) fail("control character in comment");
      ++p_;
    }
  }

  // Consumes a newline ("\n" or "\r\n"); returns false when there is none.
  bool newline() {
    if (peek() == '\n') {
      ++p_;
      return true;
    }
    if (peek() == '\r' && peek(1) == '\n') {
      p_ += 2;
      return true;
    }
    return false;
  }

  // After a key/value or a header: whitespace, an optional comment, then a
  // newline or the end of the text.
  void end_of_line() {
    skip_ws();
    if (peek() == '#') skip_comment();
    if (eof()) return;
    if (!newline()) fail("expected the end of the line");
  }

  // Whitespace, comments and newlines (inside arrays).
  void skip_blank() {
    for (;;) {
      skip_ws();
      if (peek() == '#') skip_comment();
      if (!newline()) return;
    }
  }

  void count_value() {
    if (++values_ > kMaxValues) fail("too many values");
  }

  // ---- keys ----------------------------------------------------------------

  std::vector<std::string> key() {
    std::vector<std::string> segs;
    key(&segs);
    return segs;
  }

  void key(std::vector<std::string>* out) {
    std::vector<std::string>& segs = *out;
    for (;;) {
      skip_ws();
      int c = peek();
      if (c == '"') {
        segs.push_back(basic_string());
      } else if (c == '\'') {
        segs.push_back(literal_string());
      } else if (is_bare_key_char(c)) {
        size_t b = p_;
        while (is_bare_key_char(peek())) ++p_;
        segs.emplace_back(s_.substr(b, p_ - b));
      } else {
        fail("expected a key");
      }
      if (segs.size() > static_cast<size_t>(kMaxDepth)) fail("key has too many parts");
      skip_ws();
      if (peek() != '.') return;
      ++p_;
    }
  }

  // ---- tables ----------------------------------------------------------------

  // Appends `name = v` to `table` and its shadow `n`; returns the new child.
  static Child& add(Value* table, Node* n, const std::string& name, uint32_t h, Value v, Kind kind) {
    n->add_slot(h, table->as_table().size());
    table->as_table().emplace_back(name, std::move(v));
    n->kids.emplace_back();
    Child& c = n->kids.back();
    c.kind = kind;
    if (kind != Kind::Leaf && kind != Kind::Frozen) c.node = std::make_unique<Node>();
    return c;
  }

  static Value* new_element(Value* arr, Child& c) {
    arr->as_array().push_back(Value::table());
    c.node->elems.push_back(std::make_unique<Node>());
    return &arr->as_array().back();
  }

  void header(Value* root, Node* root_node, Value** cur, Node** cur_node) {
    ++p_;
    bool aot = peek() == '[';
    if (aot) ++p_;
    key_segs_ = nullptr;
    segs_.clear();
    key(&segs_);
    key_segs_ = &segs_;
    const std::vector<std::string>& segs = segs_;
    if (aot ? !starts_with("]]") : peek() != ']')
      fail(aot ? "expected ']]' to close the array-of-tables header" : "expected ']' to close the table header");
    p_ += aot ? 2 : 1;

    Value* t = root;
    Node* n = root_node;
    for (size_t i = 0; i < segs.size(); ++i) {
      const std::string& seg = segs[i];
      bool last = i + 1 == segs.size();
      uint32_t h = Node::hash(seg);
      size_t at = n->find(t->as_table(), seg, h);
      if (at == Node::npos) {
        count_value();
        if (last && aot) {
          Child& c = add(t, n, seg, h, Value::array(), Kind::ArrayOfTables);
          t = new_element(&t->as_table().back().second, c);
          n = c.node->elems.back().get();
        } else {
          Child& c = add(t, n, seg, h, Value::table(), last ? Kind::Header : Kind::Implicit);
          t = &t->as_table().back().second;
          n = c.node.get();
        }
        continue;
      }
      Child& c = n->kids[at];
      Value* cv = &t->as_table()[at].second;
      switch (c.kind) {
        case Kind::Leaf:
          fail("'" + seg + "' is already a value, not a table");
        case Kind::Frozen:
          fail("'" + seg + "' is an inline table or array and cannot be extended");
        case Kind::ArrayOfTables:
          if (last) {
            if (!aot) fail("'" + seg + "' is an array of tables, not a table");
            count_value();
            t = new_element(cv, c);
          } else {
            t = &cv->as_array().back();
          }
          n = c.node->elems.back().get();
          break;
        case Kind::Implicit:
        case Kind::Header:
        case Kind::Dotted:
          if (last) {
            if (aot) fail("'" + seg + "' is already a table, not an array of tables");
            if (c.kind != Kind::Implicit) fail("table '" + join_key(segs) + "' is defined twice");
            c.kind = Kind::Header;
          }
          t = cv;
          n = c.node.get();
          break;
      }
    }
    *cur = t;
    *cur_node = n;
  }

  // Inserts `segs = v` below the table `t` (dotted keys create tables).
  void insert(Value* t, Node* n, const std::vector<std::string>& segs, Value v) {
    for (size_t i = 0; i + 1 < segs.size(); ++i) {
      const std::string& seg = segs[i];
      uint32_t h = Node::hash(seg);
      size_t at = n->find(t->as_table(), seg, h);
      if (at == Node::npos) {
        count_value();
        Child& c = add(t, n, seg, h, Value::table(), Kind::Dotted);
        t = &t->as_table().back().second;
        n = c.node.get();
        continue;
      }
      Child& c = n->kids[at];
      if (c.kind == Kind::Implicit) c.kind = Kind::Dotted;
      if (c.kind != Kind::Dotted)
        fail(c.kind == Kind::Leaf ? "'" + seg + "' is already a value, not a table"
                                  : "dotted key cannot add to the table '" + seg + "' defined elsewhere");
      t = &t->as_table()[at].second;
      n = c.node.get();
    }
    const std::string& last = segs.back();
    uint32_t h = Node::hash(last);
    if (n->find(t->as_table(), last, h) != Node::npos) fail("duplicate key '" + last + "'");
    bool container = v.is_table() || v.is_array();
    add(t, n, last, h, std::move(v), container ? Kind::Frozen : Kind::Leaf);
  }

  void key_value(Value* t, Node* n) {
    key_segs_ = nullptr;
    segs_.clear();
    key(&segs_);
    key_segs_ = &segs_;
    if (peek() != '=') fail("expected '=' after the key");
    ++p_;
    skip_ws();
    Value v = value(0);
    insert(t, n, segs_, std::move(v));
  }

  // ---- values ----------------------------------------------------------------

  Value value(int depth) {
    if (depth > kMaxDepth) fail("values nested too deeply");
    count_value();
    int c = peek();
    if (c == '"') {
      if (starts_with("\"\"\"")) return Value::string(ml_basic_string());
      return Value::string(basic_string());
    }
    if (c == '\'') {
      if (starts_with("'''")) return Value::string(ml_literal_string());
      return Value::string(literal_string());
    }
    if (c == '[') return array(depth);
    if (c == '{') return inline_table(depth);
    if (c == 't' || c == 'f') {
      if (starts_with("true")) {
        p_ += 4;
        return Value::boolean(true);
      }
      if (starts_with("false")) {
        p_ += 5;
        return Value::boolean(false);
      }
      fail("expected a value");
    }
    if (c == '+' || c == '-' || c == 'i' || c == 'n' || (c >= '0' && c <= '9')) return number();
    fail(c < 0 ? "expected a value, found the end of the text" : "expected a value");
  }

  Value array(int depth) {
    ++p_;
    Value arr = Value::array();
    for (;;) {
      skip_blank();
      if (peek() == ']') {
        ++p_;
        return arr;
      }
      arr.as_array().push_back(value(depth + 1));
      skip_blank();
      if (peek() == ',') {
        ++p_;
        continue;
      }
      if (peek() == ']') {
        ++p_;
        return arr;
      }
      fail("expected ',' or ']' in the array");
    }
  }

  Value inline_table(int depth) {
    ++p_;
    Value t = Value::table();
    Node node;
    skip_ws();
    if (peek() == '}') {
      ++p_;
      return t;
    }
    for (;;) {
      std::vector<std::string> segs = key();
      if (peek() != '=') fail("expected '=' after the key");
      ++p_;
      skip_ws();
      Value v = value(depth + 1);
      insert(&t, &node, segs, std::move(v));
      skip_ws();
      if (peek() == ',') {
        ++p_;
        continue;
      }
      if (peek() == '}') {
        ++p_;
        return t;
      }
      fail("expected ',' or '}' in the inline table");
    }
  }

  // ---- strings ----------------------------------------------------------------

  uint32_t hex_digits(int count) {
    uint32_t cp = 0;
    for (int i = 0; i < count; ++i) {
      int c = peek();
      int d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else fail("expected a hex digit in the unicode escape");
      cp = (cp << 4) | static_cast<uint32_t>(d);
      ++p_;
    }
    return cp;
  }

  // p_ is after the backslash.
  void escape(std::string& out) {
    int e = peek();
    ++p_;
    switch (e) {
      case 'b': out += '\b'; return;
      case 't': out += '\t'; return;
      case 'n': out += '\n'; return;
      case 'f': out += '\f'; return;
      case 'r': out += '\r'; return;
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case 'u':
      case 'U': {
        uint32_t cp = hex_digits(e == 'u' ? 4 : 8);
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("unicode escape is not a scalar value");
        append_utf8(out, cp);
        return;
      }
      default:
        --p_;
        fail("invalid escape sequence");
    }
  }

  std::string basic_string() {
    ++p_;
    std::string out;
    for (;;) {
      if (eof()) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[p_]);
      if (c == '"') {
        ++p_;
        return out;
      }
      if (c == '\\') {
        ++p_;
        escape(out);
        continue;
      }
      if (c == '\n' || c == '\r') fail("newline in a single-line string");
      if (is_control(c)) fail("control character in a string");
      out += static_cast<char>(c);
      ++p_;
    }
  }

  std::string literal_string() {
    ++p_;
    size_t b = p_;
    for (;;) {
      if (eof()) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[p_]);
      if (c == '\'') {
        std::string out(s_.substr(b, p_ - b));
        ++p_;
        return out;
      }
      if (c == '\n' || c == '\r') fail("newline in a single-line string");
      if (is_control(c)) fail("control character in a string");
      ++p_;
    }
  }

  // p_ is at a run of `q` quote characters of length >= 3 closing a
  // multi-line string: up to two extra quotes belong to the content.
  void close_multiline(std::string& out, char q) {
    size_t run = 0;
    while (peek(run) == q) ++run;
    size_t extra = run - 3 > 2 ? 2 : run - 3;
    out.append(extra, q);
    p_ += 3 + extra;
  }

  std::string ml_basic_string() {
    p_ += 3;
    newline();  // a newline right after the opening quotes is trimmed
    std::string out;
    for (;;) {
      if (eof()) fail("unterminated multi-line string");
      unsigned char c = static_cast<unsigned char>(s_[p_]);
      if (c == '"' && starts_with("\"\"\"")) {
        close_multiline(out, '"');
        return out;
      }
      if (c == '\\') {
        // A backslash ending a line trims it and all whitespace after it.
        size_t q = p_ + 1;
        while (q < s_.size() && (s_[q] == ' ' || s_[q] == '\t')) ++q;
        if (q < s_.size() && (s_[q] == '\n' || (s_[q] == '\r' && q + 1 < s_.size() && s_[q + 1] == '\n'))) {
          p_ = q;
          for (;;) {
            skip_ws();
            if (!newline()) break;
          }
          continue;
        }
        ++p_;
        escape(out);
        continue;
      }
      if (newline()) {
        out += '\n';
        continue;
      }
      if (is_control(c)) fail("control character in a string");
      out += static_cast<char>(c);
      ++p_;
    }
  }

  std::string ml_literal_string() {
    p_ += 3;
    newline();
    std::string out;
    for (;;) {
      if (eof()) fail("unterminated multi-line string");
      unsigned char c = static_cast<unsigned char>(s_[p_]);
      if (c == '\'' && starts_with("'''")) {
        close_multiline(out, '\'');
        return out;
      }
      if (newline()) {
        out += '\n';
        continue;
      }
      if (is_control(c)) fail("control character in a string");
      out += static_cast<char>(c);
      ++p_;
    }
  }

  // ---- numbers ----------------------------------------------------------------

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  // Digits of `base` with single underscores between digits; appends the
  // digits (underscores dropped) to `out`. Returns false on a malformed run.
  static bool digit_run(std::string_view s, int base, std::string* out) {
    if (s.empty()) return false;
    bool prev_digit = false;
    for (char c : s) {
      bool ok;
      if (base == 16) ok = is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      else if (base == 8) ok = c >= '0' && c <= '7';
      else if (base == 2) ok = c == '0' || c == '1';
      else ok = is_digit(c);
      if (ok) {
        out->push_back(c);
        prev_digit = true;
      } else if (c == '_' && prev_digit) {
        prev_digit = false;
      } else {
        return false;
      }
    }
    return prev_digit;
  }

  Value number() {
    size_t b = p_;
    auto tok_char = [](int c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
             c == '+' || c == '-' || c == '.' || c == ':';
    };
    while (tok_char(peek())) ++p_;
    std::string_view tok = s_.substr(b, p_ - b);
    bool neg = false, signed_ = false;
    std::string_view body = tok;
    if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
      neg = body[0] == '-';
      signed_ = true;
      body.remove_prefix(1);
    }
    if (body == "inf") return Value::floating(neg ? -HUGE_VAL : HUGE_VAL);
    if (body == "nan") return Value::floating(neg ? -std::numeric_limits<double>::quiet_NaN()
                                                  : std::numeric_limits<double>::quiet_NaN());
    p_ = b;  // errors point at the start of the number
    if (tok.find(':') != std::string_view::npos ||
        (body.size() >= 5 && body.substr(0, 4).find_first_not_of("0123456789") == std::string_view::npos &&
         body[4] == '-'))
      fail("dates and times are not supported");

    std::string digits;
    if (body.size() > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'o' || body[1] == 'b')) {
      if (signed_) fail("a sign is not allowed on hex, octal or binary integers");
      int base = body[1] == 'x' ? 16 : body[1] == 'o' ? 8 : 2;
      if (!digit_run(body.substr(2), base, &digits)) fail("malformed integer '" + std::string(tok) + "'");
      uint64_t v = 0;
      for (char c : digits) {
        uint64_t d = is_digit(c) ? static_cast<uint64_t>(c - '0')
                                 : static_cast<uint64_t>((c | 0x20) - 'a' + 10);
        if (v > (static_cast<uint64_t>(INT64_MAX) - d) / static_cast<uint64_t>(base))
          fail("integer out of range");
        v = v * static_cast<uint64_t>(base) + d;
      }
      p_ = b + tok.size();
      return Value::integer(static_cast<int64_t>(v));
    }

    // Decimal: int-part [. frac] [e exp], int-part without leading zeros.
    size_t dot = body.find('.');
    size_t exp = body.find_first_of("eE");
    size_t int_end = std::min(dot, exp);
    std::string_view int_part = body.substr(0, int_end);
    if (!digit_run(int_part, 10, &digits)) fail("malformed number '" + std::string(tok) + "'");
    if (digits.size() > 1 && digits[0] == '0') fail("leading zeros are not allowed in '" + std::string(tok) + "'");
    if (dot == std::string_view::npos && exp == std::string_view::npos) {
      uint64_t limit = neg ? static_cast<uint64_t>(INT64_MAX) + 1 : static_cast<uint64_t>(INT64_MAX);
      uint64_t v = 0;
      for (char c : digits) {
        uint64_t d = static_cast<uint64_t>(c - '0');
        if (v > (limit - d) / 10) fail("integer out of range");
        v = v * 10 + d;
      }
      p_ = b + tok.size();
      if (neg) return Value::integer(v == static_cast<uint64_t>(INT64_MAX) + 1 ? INT64_MIN : -static_cast<int64_t>(v));
      return Value::integer(static_cast<int64_t>(v));
    }
    std::string clean(neg ? "-" : "");
    clean += digits;
    if (dot != std::string_view::npos) {
      if (exp != std::string_view::npos && exp < dot) fail("malformed float '" + std::string(tok) + "'");
      std::string_view frac = body.substr(dot + 1, exp == std::string_view::npos ? std::string_view::npos : exp - dot - 1);
      clean += '.';
      if (!digit_run(frac, 10, &clean)) fail("malformed float '" + std::string(tok) + "'");
    }
    if (exp != std::string_view::npos) {
      std::string_view e = body.substr(exp + 1);
      clean += 'e';
      if (!e.empty() && (e[0] == '+' || e[0] == '-')) {
        clean += e[0];
        e.remove_prefix(1);
      }
      if (!digit_run(e, 10, &clean)) fail("malformed float '" + std::string(tok) + "'");
    }
    p_ = b + tok.size();
    return Value::floating(to_double(clean));
  }

  static double to_double(const std::string& s) {
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
    double d = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), d);
    if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return d;
#endif
    // Out of range (or no floating from_chars): strtod gives +-HUGE_VAL / 0.
    return std::strtod(s.c_str(), nullptr);
  }
};

}  // namespace

Value parse(std::string_view text, const std::string& section) {
  Parser p(text, section);
  return p.run();
}

}  // namespace cyb::toml
