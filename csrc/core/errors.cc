#include "core/errors.h"

namespace cyb {

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::Format: return "FormatError";
    case ErrorKind::UnsupportedOp: return "UnsupportedOp";
    case ErrorKind::ShapeMismatch: return "ShapeMismatch";
    case ErrorKind::MissingTensor: return "MissingTensor";
    case ErrorKind::WeightFormatMismatch: return "WeightFormatMismatch";
    case ErrorKind::OutOfMemory: return "OutOfMemory";
    case ErrorKind::BackendInit: return "BackendInit";
    case ErrorKind::InvalidConfig: return "InvalidConfig";
    case ErrorKind::Tokenizer: return "Tokenizer";
  }
  return "Error";
}

const std::vector<ErrorVariant>& error_variants() {
  static const std::vector<ErrorVariant> kVariants = {
      {ErrorKind::Format, "FormatError", {"section", "key", "reason"}, {}},
      {ErrorKind::UnsupportedOp, "UnsupportedOp", {"op", "backend", "input_dtype"}, {}},
      {ErrorKind::ShapeMismatch, "ShapeMismatch", {"op", "expected", "got"}, {}},
      {ErrorKind::MissingTensor, "MissingTensor", {"name", "required_by"}, {}},
      {ErrorKind::WeightFormatMismatch, "WeightFormatMismatch", {"name", "declared", "actual_bytes"}, {"actual_bytes"}},
      {ErrorKind::OutOfMemory, "OutOfMemory", {"backend", "requested_bytes"}, {"requested_bytes"}},
      {ErrorKind::BackendInit, "BackendInit", {"backend", "reason"}, {}},
      {ErrorKind::InvalidConfig, "InvalidConfig", {"field", "reason"}, {}},
      {ErrorKind::Tokenizer, "Tokenizer", {"reason"}, {}},
  };
  return kVariants;
}

std::string escape_nul(std::string s) {
  for (size_t i = s.find('\0'); i != std::string::npos; i = s.find('\0', i + 2)) s.replace(i, 1, "\\0");
  return s;
}

std::string shape_str(const std::vector<int64_t>& s) {
  // No iostreams: a module whose libstdc++ locale state is not initialised (seen on the
  // H200 device image, GCC 13) crashes inside ostream's number formatting.
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

std::string error_message(ErrorKind k, const Error::Fields& fields) {
  auto f = [&fields](const char* name) -> std::string {
    for (const auto& kv : fields)
      if (kv.first == name) return kv.second;
    return "";
  };
  switch (k) {
    case ErrorKind::Format: {
      std::string where = f("section").empty() ? "file" : "section '" + f("section") + "'";
      if (!f("key").empty()) where += ", key '" + f("key") + "'";
      return "malformed .model (" + where + "): " + f("reason");
    }
    case ErrorKind::UnsupportedOp:
      return "op '" + f("op") + "' is not supported by backend '" + f("backend") + "' for input dtype " +
             f("input_dtype");
    case ErrorKind::ShapeMismatch:
      return "shape mismatch in '" + f("op") + "': expected " + f("expected") + ", got " + f("got");
    case ErrorKind::MissingTensor:
      return "missing tensor '" + f("name") + "' (required by " + f("required_by") + ")";
    case ErrorKind::WeightFormatMismatch:
      return "tensor '" + f("name") + "' declared as " + f("declared") + " but has " + f("actual_bytes") + " bytes";
    case ErrorKind::OutOfMemory:
      return "backend '" + f("backend") + "' is out of memory (requested " + f("requested_bytes") + " bytes)";
    case ErrorKind::BackendInit:
      return "backend '" + f("backend") + "' failed to start: " + f("reason");
    case ErrorKind::InvalidConfig:
      return "invalid config '" + f("field") + "': " + f("reason");
    case ErrorKind::Tokenizer:
      return "tokenizer error: " + f("reason");
  }
  return "";
}

namespace {
[[noreturn]] void raise(ErrorKind k, Error::Fields fields, const std::string& detail = "") {
  std::string msg = error_message(k, fields);
  if (!detail.empty()) msg += ": " + detail;
  throw Error(k, std::move(msg), std::move(fields));
}
}  // namespace

void throw_format(const std::string& section, const std::string& key, const std::string& reason) {
  raise(ErrorKind::Format, {{"section", section}, {"key", key}, {"reason", reason}});
}

void throw_unsupported_op(const std::string& op, const std::string& backend,
                          const std::string& input_dtype) {
  raise(ErrorKind::UnsupportedOp, {{"op", op}, {"backend", backend}, {"input_dtype", input_dtype}});
}

void throw_shape_mismatch(const std::string& op, const std::vector<int64_t>& expected,
                          const std::vector<int64_t>& got) {
  raise(ErrorKind::ShapeMismatch, {{"op", op}, {"expected", shape_str(expected)}, {"got", shape_str(got)}});
}

void throw_missing_tensor(const std::string& name, const std::string& required_by) {
  raise(ErrorKind::MissingTensor, {{"name", name}, {"required_by", required_by}});
}

void throw_weight_format(const std::string& name, const std::string& declared,
                         uint64_t actual_bytes, const std::string& reason) {
  raise(ErrorKind::WeightFormatMismatch,
        {{"name", name}, {"declared", declared}, {"actual_bytes", std::to_string(actual_bytes)}}, reason);
}

void throw_oom(const std::string& backend, uint64_t requested_bytes) {
  raise(ErrorKind::OutOfMemory, {{"backend", backend}, {"requested_bytes", std::to_string(requested_bytes)}});
}

void throw_backend_init(const std::string& backend, const std::string& reason) {
  raise(ErrorKind::BackendInit, {{"backend", backend}, {"reason", reason}});
}

void throw_invalid_config(const std::string& field, const std::string& reason) {
  raise(ErrorKind::InvalidConfig, {{"field", field}, {"reason", reason}});
}

void throw_tokenizer(const std::string& reason) {
  raise(ErrorKind::Tokenizer, {{"reason", reason}});
}

}  // namespace cyb
