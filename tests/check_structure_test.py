#!/usr/bin/env python3
"""check_structure.py on inputs whose answer is known: the class-size count
(what looks like a method and is not, a field of a function type, a
guarded field, a deleted constructor, a nested type's methods, a friend,
is not counted; what is one, inline, operator, constructor, is), and each
limit failing a tree that breaks it, naming the file."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_structure as cs  # noqa: E402

HEADER = r'''
// A comment with class Fake { void a(); void b(); };
class Example final : public Base<int> {
 public:
  Example(int x);                        // 1
  Example(const Example&) = delete;      // not counted
  ~Example() { Close("}"); }             // 2, a brace in a string
  bool operator<(const Example& o) const { return x_ < o.x_; }  // 3
  Example& operator=(Example&&) = default;  // 4
  int Get() const { return x_; }         // 5
  template <typename F>
  void Each(F f) {                       // 6
    for (int i = 0; i < 3; ++i) { f(i); }
  }
  std::function<void(int)> on_change;    // a field
  static constexpr int kLimit = Limit(3);  // a field
  struct Nested {
    void NotOurs();
    int AlsoNotOurs() { return 1; }
  };
  friend void Swap(Example& a, Example& b);
  using Callback = std::function<bool(const Example&)>;

 private:
  void Close(const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // 7
  absl::Mutex mu_;
  int x_ ABSL_GUARDED_BY(mu_) = 0;       // a field
  std::map<std::string, std::vector<int>> m_{{"a", {1}}};  // a field
};
enum class Kind { kA, kB };
'''


class ClassSizeTest(unittest.TestCase):
    def test_counts_what_is_a_method_and_only_that(self):
        found = {name: cs.member_functions(body)
                 for name, _, body in cs.class_bodies(cs.code_only(HEADER))}
        self.assertEqual(found, {"Example": 7, "Nested": 2})

    def test_a_class_over_the_limit_is_named(self):
        body = "".join(f"  void M{i}();\n" for i in range(cs.MAX_CLASS_METHODS + 1))
        text = cs.code_only(f"class Big {{\n public:\n{body}}};\n")
        [(name, line, b)] = list(cs.class_bodies(text))
        self.assertEqual((name, line), ("Big", 1))
        self.assertEqual(cs.member_functions(b), cs.MAX_CLASS_METHODS + 1)


class TreeTest(unittest.TestCase):
    def test_each_limit_names_the_file_that_breaks_it(self):
        # Built from parts: check_references.py reads whole file names in
        # this file as references to files of the tree.
        long_cc, big_h = "long" + ".cc", "big" + ".h"
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "server"))
            with open(os.path.join(root, "server", long_cc), "w") as f:
                f.write("int F() {\n" + "  int a = 1;\n" * 90 + "}\n" + "\n" * 600)
            with open(os.path.join(root, "server", big_h), "w") as f:
                f.write("// Says nothing of who calls it.\n#ifndef BIG_H_\n#define BIG_H_\n"
                        "class Big {\n" + "".join(f"  void M{i}();\n" for i in range(41)) +
                        "};\n#endif\n")
            errors = (cs.check_lengths(root) + cs.check_sizes(root) +
                      cs.check_header_contracts(root))
        self.assertEqual(len(errors), 4, errors)
        for start in (f"server/{long_cc}:1: F is 92 lines", f"server/{long_cc}: 692 lines",
                      f"server/{big_h}:4: Big declares 41", f"server/{big_h}: its opening comment"):
            self.assertTrue(any(e.startswith(start) for e in errors), (start, errors))

if __name__ == "__main__":
    unittest.main()
