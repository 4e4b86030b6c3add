#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgsl_preprocess.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/errors.h"

namespace cyb {

const char* wgsl_source(const char* name);  // generated from shaders/wgsl

namespace wgpu {
namespace {

// The line of src starting at pos (without its newline); *end: where it ends.
std::string line_at(const std::string& src, size_t pos, size_t* end) {
  size_t e = src.find('\n', pos);
  if (e == std::string::npos) e = src.size();
  *end = e;
  return src.substr(pos, e - pos);
}

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `body` with every whole-word `name` replaced by `value`.
std::string replace_word(const std::string& body, const std::string& name, const std::string& value) {
  std::string out;
  for (size_t i = 0; i < body.size();) {
    if (body.compare(i, name.size(), name) == 0 && (i == 0 || !ident_char(body[i - 1])) &&
        (i + name.size() >= body.size() || !ident_char(body[i + name.size()]))) {
      out += value;
      i += name.size();
    } else {
      out += body[i++];
    }
  }
  return out;
}

// The digits of `const NAME = <digits>u;` in src ("" when there is no such line).
std::string const_u32(const std::string& src, const std::string& name) {
  const std::string decl = "const " + name + " = ";
  for (size_t at = src.find(decl); at != std::string::npos; at = src.find(decl, at + 1)) {
    if (at > 0 && ident_char(src[at - 1])) continue;
    size_t q = at + decl.size(), d0 = q;
    while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) ++q;
    if (q > d0 && src.compare(q, 2, "u;") == 0) return src.substr(d0, q - d0);
  }
  return "";
}

[[noreturn]] void wg_unsized(const std::string& key, const std::string& what) {
  throw_backend_init("wgpu+rs", "shader '" + key + "': cannot size the workgroup variable type '" + what + "'");
}
std::string wg_trim(const std::string& t) {
  const size_t a = t.find_first_not_of(" \t"), b = t.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : t.substr(a, b - a + 1);
}
uint64_t wg_constant(const std::string& src, const std::string& key, const std::string& n) {
  for (size_t p = src.find("const " + n); p != std::string::npos; p = src.find("const " + n, p + 1)) {
    size_t q = p + 6 + n.size();
    while (q < src.size() && src[q] == ' ') ++q;
    if (q >= src.size() || src[q] != '=') continue;
    const uint64_t v = std::strtoull(src.c_str() + q + 1, nullptr, 10);
    if (v > 0) return v;
  }
  wg_unsized(key, n);
}
uint64_t wg_type_bytes(const std::string& t, const std::string& src, const std::string& key) {
  if (t == "f32" || t == "u32" || t == "i32" || t == "atomic<u32>" || t == "atomic<i32>") return 4;
  if (t == "f16") return 2;
  if (t.size() > 6 && t.compare(0, 3, "vec") == 0 && t[4] == '<' && t.back() == '>' && t[3] >= '2' && t[3] <= '4')
    return uint64_t(t[3] == '3' ? 4 : t[3] - '0') * wg_type_bytes(t.substr(5, t.size() - 6), src, key);
  if (t.compare(0, 6, "array<") == 0 && t.back() == '>') {
    const size_t c = t.rfind(',');
    if (c == std::string::npos) wg_unsized(key, t);
    std::string n = wg_trim(t.substr(c + 1, t.size() - c - 2));
    if (!n.empty() && n.back() == 'u') n.pop_back();
    const uint64_t len = !n.empty() && std::isdigit(static_cast<unsigned char>(n[0]))
                             ? std::strtoull(n.c_str(), nullptr, 10)
                             : wg_constant(src, key, n);
    return len * wg_type_bytes(wg_trim(t.substr(6, c - 6)), src, key);
  }
  wg_unsized(key, t);
}

}  // namespace

// `//#if NAME`, `//#if !NAME`, `//#else`, `//#endif` (nestable) on whole lines.
std::string preprocess(const std::string& src, const std::vector<std::string>& defs) {
  std::string out;
  std::vector<std::pair<bool, bool>> stack;  // (active, parent active)
  bool active = true;
  size_t pos = 0;
  while (pos < src.size()) {
    size_t e = src.find('\n', pos);
    if (e == std::string::npos) e = src.size();
    std::string line = src.substr(pos, e - pos);
    pos = e + 1;
    size_t f = line.find_first_not_of(" \t");
    std::string t = f == std::string::npos ? "" : line.substr(f);
    if (t.rfind("//#if ", 0) == 0) {
      std::string name = t.substr(6);
      bool neg = !name.empty() && name[0] == '!';
      if (neg) name = name.substr(1);
      bool def = std::find(defs.begin(), defs.end(), name) != defs.end();
      stack.push_back({active, active});
      active = active && (def != neg);
      continue;
    }
    if (t.rfind("//#else", 0) == 0) {
      active = stack.back().second && !active;
      continue;
    }
    if (t.rfind("//#endif", 0) == 0) {
      active = stack.back().first;
      stack.pop_back();
      continue;
    }
    if (active) {
      out += line;
      out += '\n';
    }
  }
  return out;
}

// module: where the loops' constants are declared (src itself at the top level).
std::string unroll(const std::string& src, const std::string* module) {
  const std::string& mod = module ? *module : src;
  std::string out;
  size_t pos = 0;
  while (pos < src.size()) {
    size_t e;
    const std::string line = line_at(src, pos, &e);
    const size_t f = line.find_first_not_of(" \t");
    if (f == std::string::npos || line.compare(f, std::string::npos, "//#unroll") != 0) {
      out += line + "\n";
      pos = e + 1;
      continue;
    }
    const size_t fe = std::min(src.find('\n', e + 1), src.size());
    const std::string for_line = src.substr(e + 1, fe - e - 1);
    const auto bad = [&] {
      throw_backend_init("wgpu+rs", "shader: //#unroll is not followed by a counted loop: '" + for_line + "'");
    };
    const size_t ind = for_line.find_first_not_of(" \t");
    const std::string head = "for (var ";
    if (ind == std::string::npos || for_line.compare(ind, head.size(), head) != 0) bad();
    size_t q = ind + head.size(), v0 = q;
    while (q < for_line.size() && ident_char(for_line[q])) ++q;
    const std::string var = for_line.substr(v0, q - v0);
    const std::string mid = " = 0u; " + var + " < ";
    if (var.empty() || for_line.compare(q, mid.size(), mid) != 0) bad();
    q += mid.size();
    size_t n0 = q;
    while (q < for_line.size() && ident_char(for_line[q])) ++q;
    std::string bound = for_line.substr(n0, q - n0);  // `16u` or a module constant's name
    if (!bound.empty() && std::isdigit(static_cast<unsigned char>(bound[0]))) {
      if (bound.back() != 'u') bad();
      bound.pop_back();
    } else if (!bound.empty()) {
      bound = const_u32(mod, bound);
    }
    const std::string tail = "; " + var + "++) {";
    if (bound.empty() || bound.find_first_not_of("0123456789") != std::string::npos ||
        for_line.compare(q, std::string::npos, tail) != 0)
      bad();
    const int n = std::stoi(bound);
    const std::string indent = for_line.substr(0, ind);
    size_t i = fe + 1;
    for (int depth = 1; i < src.size() && depth > 0; ++i) depth += src[i] == '{' ? 1 : src[i] == '}' ? -1 : 0;
    std::string body = src.substr(fe + 1, i - 1 - (fe + 1));
    body.erase(body.find_last_not_of(" \t") + 1);  // the closing brace's indentation
    body = unroll(body, &mod);                       // loops marked inside it
    for (int k = 0; k < n; ++k) out += indent + "{\n" + replace_word(body, var, std::to_string(k) + "u") + indent + "}\n";
    const size_t nl = src.find('\n', i);
    pos = nl == std::string::npos ? src.size() : nl + 1;
  }
  return out;
}

// `//#include NAME` lines replaced by shaders/wgsl/NAME.wgsl (itself expanded), each file once.
std::string include(const std::string& src, std::vector<std::string>* seen) {
  std::string out;
  size_t pos = 0;
  while (pos < src.size()) {
    size_t e;
    const std::string line = line_at(src, pos, &e);
    pos = e + 1;
    const size_t f = line.find_first_not_of(" \t");
    const std::string tag = "//#include ";
    if (f == std::string::npos || line.compare(f, tag.size(), tag) != 0) {
      out += line + "\n";
      continue;
    }
    const std::string name = line.substr(f + tag.size());
    if (std::find(seen->begin(), seen->end(), name) != seen->end()) continue;
    seen->push_back(name);
    out += include(wgsl_source(name.c_str()), seen);
  }
  return out;
}

void replace_all(std::string& s, const std::string& a, const std::string& b) {
  for (size_t p = s.find(a); p != std::string::npos; p = s.find(a, p + b.size())) s.replace(p, a.size(), b);
}

uint64_t workgroup_bytes(const std::string& src, const std::string& key) {
  uint64_t total = 0;
  const std::string tag = "var<workgroup>";
  for (size_t p = src.find(tag); p != std::string::npos; p = src.find(tag, p + tag.size())) {
    const size_t colon = src.find(':', p), semi = src.find(';', p);
    if (colon == std::string::npos || semi == std::string::npos || colon > semi) wg_unsized(key, src.substr(p, 40));
    total += wg_type_bytes(wg_trim(src.substr(colon + 1, semi - colon - 1)), src, key);
  }
  return total;
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
