// Structured errors (docs/errors.md).
// Every error carries its variant and named fields; the Python bindings turn
// each variant into its own exception class with the fields as attributes.
// The variant table and the message of each variant are defined here once:
// cyb_llm.errors reads both through cyb_llm._core (error_variants,
// error_message).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cyb {

enum class ErrorKind {
  Format,               // malformed .model container (section, key, offset)
  UnsupportedOp,        // op, backend, input_dtype
  ShapeMismatch,        // op, expected, got
  MissingTensor,        // name, required_by
  WeightFormatMismatch, // name, declared, actual_bytes
  OutOfMemory,          // backend, requested_bytes
  BackendInit,          // backend, reason
  InvalidConfig,        // field, reason
  Tokenizer,            // reason
};

const char* error_kind_name(ErrorKind k);

// One row per variant: its name (as error_kind_name) and its field names in
// positional order; int_fields are the ones that hold decimal integers.
struct ErrorVariant {
  ErrorKind kind;
  const char* name;
  std::vector<const char*> fields;
  std::vector<const char*> int_fields;
};
const std::vector<ErrorVariant>& error_variants();

// `s` with every NUL byte replaced by the two characters "\\0".
std::string escape_nul(std::string s);

class Error : public std::runtime_error {
 public:
  using Fields = std::vector<std::pair<std::string, std::string>>;
  // NUL bytes in the message are written as "\\0": what() is a C string and
  // would otherwise end there. The fields keep their exact bytes.
  Error(ErrorKind kind, std::string message, Fields fields)
      : std::runtime_error(escape_nul(std::move(message))), kind_(kind), fields_(std::move(fields)) {}
  ErrorKind kind() const { return kind_; }
  const Fields& fields() const { return fields_; }

 private:
  ErrorKind kind_;
  Fields fields_;
};

std::string shape_str(const std::vector<int64_t>& s);

// The message of variant `k` built from its fields (looked up by name; an
// absent field reads as ""). Every throw_* below uses it.
std::string error_message(ErrorKind k, const Error::Fields& fields);

// Constructors, one per variant; each builds a message naming what is wrong.
[[noreturn]] void throw_format(const std::string& section, const std::string& key,
                               const std::string& reason);
[[noreturn]] void throw_unsupported_op(const std::string& op, const std::string& backend,
                                       const std::string& input_dtype);
[[noreturn]] void throw_shape_mismatch(const std::string& op, const std::vector<int64_t>& expected,
                                       const std::vector<int64_t>& got);
[[noreturn]] void throw_missing_tensor(const std::string& name, const std::string& required_by);
[[noreturn]] void throw_weight_format(const std::string& name, const std::string& declared,
                                      uint64_t actual_bytes, const std::string& reason = "");
[[noreturn]] void throw_oom(const std::string& backend, uint64_t requested_bytes);
[[noreturn]] void throw_backend_init(const std::string& backend, const std::string& reason);
[[noreturn]] void throw_invalid_config(const std::string& field, const std::string& reason);
[[noreturn]] void throw_tokenizer(const std::string& reason);

}  // namespace cyb
