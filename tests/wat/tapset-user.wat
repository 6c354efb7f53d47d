;; A plugin written in WebAssembly text, no Rust: the core module of a component of the
;; world in tapset-user.wit (the test embeds that world and makes the component with
;; wit-component, as a C or Zig toolchain does). At `begin` it asks the linked syscalls
;; tapset for the name of syscall 257 and of errno -2 and logs both.
(module
  (import "wasmtap:plugin/services@0.2.0" "log" (func $log (param i32 i32 i32)))
  (import "wasmtap:syscalls/decode@0.1.0" "syscall-name" (func $syscall_name (param i64 i32)))
  (import "wasmtap:syscalls/decode@0.1.0" "errno-name" (func $errno_name (param i64 i32)))

  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))

  ;; Strings.
  (data (i32.const 0) "tapset-user")
  (data (i32.const 16) "0.1.0")
  (data (i32.const 32) "names a syscall and an errno through the linked syscalls tapset")
  (data (i32.const 160) "begin")
  ;; plugin-info at 256: name, version, description, params (pointer, length each).
  (data (i32.const 256)
    "\00\00\00\00\0b\00\00\00"
    "\10\00\00\00\05\00\00\00"
    "\20\00\00\00\3f\00\00\00"
    "\00\00\00\00\00\00\00\00")
  ;; start's result<plan, string> at 320: ok, then the plan at 324: one subscription
  ;; at 400, no tables, no kernel aggregations.
  (data (i32.const 320)
    "\00\00\00\00"
    "\90\01\00\00\01\00\00\00"
    "\00\00\00\00\00\00\00\00"
    "\00\00\00\00\00\00\00\00")
  ;; The subscription at 400: probe "begin"; an empty filter (six empty lists); no
  ;; stacks; not optional.
  (data (i32.const 400) "\a0\00\00\00\05\00\00\00")
  ;; An empty list<aggregation> at 480 (zeros).

  ;; Allocation for what the host and the tapset hand over: a bump allocator, reset when
  ;; each call returns (nothing handed over outlives the call).
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32)
    (result i32)
    (local $p i32)
    (local.set $p
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.xor (i32.sub (local.get $align) (i32.const 1)) (i32.const -1))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    (block $fits
      (br_if $fits (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
      (if (i32.eq
            (memory.grow
              (i32.add (i32.shr_u (i32.sub (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
                                  (i32.const 16))
                       (i32.const 1)))
            (i32.const -1))
        (then unreachable)))
    (local.get $p))

  ;; Log the option<string> the tapset wrote at 512, if it is some.
  (func $log_answer
    (if (i32.eq (i32.load8_u (i32.const 512)) (i32.const 1))
      (then (call $log (i32.const 1) (i32.load (i32.const 516)) (i32.load (i32.const 520))))))

  (func (export "info") (result i32) (i32.const 256))
  (func (export "start") (param i32 i32) (result i32)
    (global.set $heap (i32.const 1024))
    (i32.const 320))
  (func (export "on-batch") (param i32 i32)
    (global.set $heap (i32.const 1024)))
  (func (export "on-tick") (param $sub i32) (param $now i64) (result i32)
    (call $syscall_name (i64.const 257) (i32.const 512))
    (call $log_answer)
    (call $errno_name (i64.const -2) (i32.const 512))
    (call $log_answer)
    (global.set $heap (i32.const 1024))
    (i32.const 480))
  (func (export "finish") (result i32) (i32.const 480))
)
