"""Layer 3: record (structured) arrays in kernels, as numba's record tests use them: fields read and written by
attribute and by constant string index, `rec = r[i]` as a reference to the element, n-D record arrays, packed and
`align=True` layouts, host and device arrays, typed signatures; each kernel checked exactly against numpy."""

import numpy as np
import pytest

from lapis.numba import cuda, float64, from_dtype, void

pytestmark = pytest.mark.filterwarnings("ignore::lapis.cuda.PerformanceWarning")    # host arrays, copied
rng = np.random.default_rng(7)

POINT = np.dtype([("x", np.float32), ("y", np.int32)])
# Every scalar field type, in an order that needs padding: numpy's aligned layout (80 bytes).
EVERY = np.dtype([("b", np.bool_), ("i8", np.int8), ("f64", np.float64), ("u16", np.uint16), ("c64", np.complex64),
                  ("i16", np.int16), ("f16", np.float16), ("u8", np.uint8), ("c128", np.complex128),
                  ("i32", np.int32), ("u32", np.uint32), ("f32", np.float32), ("i64", np.int64),
                  ("u64", np.uint64)], align=True)
PACKED = np.dtype([("x", np.float64), ("y", np.int32), ("z", np.int16), ("a", np.int8), ("b", np.uint8)])
ALIGNED = np.dtype([("a", np.int8), ("x", np.float64), ("z", np.int16), ("y", np.int32)], align=True)
# Packed with fields at odd offsets (and a 27-byte itemsize): each moves byte by byte.
MISALIGNED = np.dtype([("a", np.int8), ("x", np.float64), ("y", np.int32), ("h", np.float16), ("s", np.int16),
                       ("c", np.complex64), ("u", np.uint16)])


def random_records(shape, dtype) -> np.ndarray:
    r = np.zeros(shape, dtype)
    for name in dtype.names:
        t = dtype.fields[name][0]
        if t.kind == "b":
            r[name] = rng.integers(0, 2, shape).astype(bool)
        elif t.kind in "iu":
            info = np.iinfo(t)
            r[name] = rng.integers(info.min, info.max, shape, dtype=t, endpoint=True)
        elif t.kind == "c":
            r[name].real, r[name].imag = rng.uniform(-100, 100, shape), rng.uniform(-100, 100, shape)
        else:
            r[name] = rng.uniform(-100, 100, shape)
    return r


@cuda.jit
def point_sum(r, out):
    i = cuda.grid(1)
    if i < r.size:
        out[i] = r[i].x * r[i]["y"] + r[i].y


def test_fields_read_by_attribute_and_by_string_into_a_plain_array():
    r = random_records(100, POINT)
    r["y"] = rng.integers(-1000, 1000, 100)
    out = np.zeros(100, np.float64)
    point_sum[1, 128](r, out)
    want = (r["x"] * r["y"].astype(np.float64) + r["y"]).astype(np.float64)
    np.testing.assert_array_equal(out, want)


@cuda.jit
def transform_every_field(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i].b = not src[i].b
        dst[i].i8 = src[i].i8 * 2
        dst[i].f64 = src[i].f64 * 2.0
        dst[i].u16 = src[i].u16 + 1
        dst[i].c64 = src[i].c64 * 2
        dst[i].i16 = src[i].i16 - 3
        dst[i].f16 = src[i].f16 * 2
        dst[i].u8 = src[i].u8 + 7
        dst[i].c128 = src[i].c128.conjugate()
        dst[i].i32 = src[i].i32 // 3
        dst[i].u32 = src[i].u32 ^ 5
        dst[i].f32 = src[i].f32 * 0.5
        dst[i].i64 = src[i].i64 - 1
        dst[i].u64 = src[i].u64 >> 3


def test_every_scalar_field_type_of_an_aligned_record_read_and_written():
    src, dst = random_records(64, EVERY), np.zeros(64, EVERY)
    src["i64"][0], src["u64"][0] = np.iinfo(np.int64).min, np.iinfo(np.uint64).max
    d_dst = cuda.to_device(dst)
    transform_every_field[2, 32](cuda.to_device(src), d_dst)
    got = d_dst.copy_to_host()
    want = np.zeros(64, EVERY)
    with np.errstate(over="ignore"):
        want["b"] = ~src["b"]
        want["i8"] = src["i8"] * np.int8(2)
        want["f64"] = src["f64"] * 2.0
        want["u16"] = src["u16"] + np.uint16(1)
        want["c64"] = src["c64"] * np.complex64(2)
        want["i16"] = src["i16"] - np.int16(3)
        want["f16"] = src["f16"] * np.float16(2)
        want["u8"] = src["u8"] + np.uint8(7)
        want["c128"] = np.conj(src["c128"])
        want["i32"] = src["i32"] // 3
        want["u32"] = src["u32"] ^ np.uint32(5)
        want["f32"] = src["f32"] * np.float32(0.5)
        want["i64"] = src["i64"] - np.int64(1)
        want["u64"] = src["u64"] >> np.uint64(3)
    for name in EVERY.names:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@cuda.jit
def through_a_name(r, out):
    i = cuda.grid(1)
    if i < r.size:
        rec = r[i]
        rec.x = rec.x + 1.0          # written to memory: r[i] sees it
        rec["y"] = rec["y"] * 2
        out[i] = r[i].x + rec.y


def test_a_record_bound_to_a_name_refers_to_the_element():
    r = random_records(50, POINT)
    r["y"] = rng.integers(-1000, 1000, 50)
    d = cuda.to_device(r)
    out = cuda.device_array(50, np.float64)
    through_a_name[1, 64](d, out)
    want = r.copy()
    want["x"] += np.float32(1)
    want["y"] *= 2
    np.testing.assert_array_equal(d.copy_to_host(), want)
    np.testing.assert_array_equal(out.copy_to_host(), want["x"].astype(np.float64) + want["y"])


@cuda.jit
def grid_2d(r, out):
    i, j = cuda.grid(2)
    if i < r.shape[0] and j < r.shape[1]:
        out[i, j] = r[i, j].x - r[i][j]["y"]
        r[i, j].y = i * 100 + j
        row = r[i]
        row[j].x = row[j].x * 2


def test_a_two_dimensional_record_array_and_its_rows():
    r = random_records((5, 7), POINT)
    r["y"] = rng.integers(-1000, 1000, (5, 7))
    d = cuda.to_device(r)
    out = cuda.device_array((5, 7), np.float64)
    grid_2d[(1, 1), (8, 8)](d, out)
    np.testing.assert_array_equal(out.copy_to_host(), r["x"].astype(np.float64) - r["y"])
    want = r.copy()
    want["y"] = np.arange(5)[:, None] * 100 + np.arange(7)
    want["x"] *= 2
    np.testing.assert_array_equal(d.copy_to_host(), want)


@cuda.jit
def mix_fields(r, out):
    i = cuda.grid(1)
    if i < r.size:
        out[i] = r[i].x + r[i].y + r[i].z + r[i].a
        r[i].a = r[i].a + 1
        r[i].z = i


@pytest.mark.parametrize("dtype", [PACKED, ALIGNED], ids=["packed", "aligned"])
@pytest.mark.parametrize("where", ["host", "device"])
def test_packed_and_aligned_layouts_from_host_and_device_arrays(dtype, where):
    assert (dtype.itemsize, dtype.isalignedstruct) == ((16, False) if dtype is PACKED else (24, True))
    r = random_records(40, dtype)
    r["a"] = rng.integers(-128, 127, 40)
    arg = r.copy() if where == "host" else cuda.to_device(r)
    out = np.zeros(40, np.float64)
    mix_fields[1, 64](arg, out)
    got = arg if where == "host" else arg.copy_to_host()
    np.testing.assert_array_equal(out, r["x"] + r["y"] + r["z"] + r["a"])
    want = r.copy()
    want["a"] += np.int8(1)
    want["z"] = np.arange(40)
    np.testing.assert_array_equal(got, want)


@cuda.jit(void(from_dtype(POINT)[:], float64[:]))
def typed(r, out):
    i = cuda.grid(1)
    if i < r.size:
        out[i] = r[i].x + r[i].y


def test_a_typed_signature_with_from_dtype():
    rec_t = from_dtype(POINT)
    assert str(rec_t) == "Record(x[type=float32;offset=0],y[type=int32;offset=4];8;False)"   # numba's spelling
    assert str(rec_t[:]) == f"array({rec_t}, 1d, A)" and rec_t.dtype == POINT
    r = random_records(20, POINT)
    out = cuda.device_array(20, np.float64)
    typed[1, 32](cuda.to_device(r), out)
    np.testing.assert_array_equal(out.copy_to_host(), r["x"].astype(np.float64) + r["y"])


def wrong_attribute(r, out):
    out[0] = r[0].z


def wrong_string(r, out):
    out[0] = r[0]["z"]


def wrong_write(r, out):
    r[0].z = 1.0


def whole_element(r, out):
    r[0] = r[1]


REFUSED = [
    (wrong_attribute, r"record has no field 'z' \(its fields: x, y\)", POINT),
    (wrong_string, r"record has no field 'z' \(its fields: x, y\)", POINT),
    (wrong_write, r"record has no field 'z' \(its fields: x, y\)", POINT),
    (whole_element, r"cannot assign a whole element of record array 'r': assign its fields", POINT),
]


@pytest.mark.parametrize("kernel, message, dtype", REFUSED, ids=[k.__name__ for k, _, _ in REFUSED])
def test_a_field_the_record_lacks_is_a_compile_error_at_its_line(kernel, message, dtype):
    with pytest.raises(cuda.CompileError, match=message) as e:
        cuda.jit(kernel)[1, 1](cuda.to_device(np.zeros(4, dtype)), cuda.device_array(4, np.float64))
    assert e.value.filename == __file__ and e.value.line == kernel.__code__.co_firstlineno + 1


@cuda.jit
def misaligned_fields(r, out):
    i = cuda.grid(1)
    if i < r.size:
        rec = r[i]
        out[i] = rec.x + rec.y + rec.h + rec.s + rec.u + rec.c.imag
        rec.a = rec.a - 1
        rec.x = rec.x * 2.0
        rec.y = rec.y ^ 0x5A5A
        rec.h = rec.h + 1
        rec.s = -rec.s
        rec.c = rec.c * 1j
        rec.u = rec.u + 3


def test_misaligned_fields_of_a_packed_record_move_byte_by_byte():
    assert MISALIGNED.itemsize == 27 and MISALIGNED.fields["x"][1] == 1
    r = random_records(33, MISALIGNED)
    r["h"] = rng.integers(-500, 500, 33)
    d = cuda.to_device(r)
    out = cuda.device_array(33, np.float64)
    misaligned_fields[2, 32](d, out)
    want_out = r["x"] + r["y"] + r["h"].astype(np.float64) + r["s"] + r["u"] + r["c"].imag.astype(np.float64)
    np.testing.assert_array_equal(out.copy_to_host(), want_out)
    want = r.copy()
    with np.errstate(over="ignore"):
        want["a"] -= np.int8(1)
        want["x"] *= 2
        want["y"] ^= 0x5A5A
        want["h"] += np.float16(1)
        want["s"] = -want["s"]
        want["c"] = want["c"] * np.complex64(1j)
        want["u"] += np.uint16(3)
    got = d.copy_to_host()
    for name in MISALIGNED.names:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("dtype, message", [
    (np.dtype([("p", POINT), ("w", np.int32)]), "nested records are not supported"),
    (np.dtype([("v", np.float32, (3,))]), "array-valued fields are not supported"),
], ids=["nested", "array field"])
def test_nested_records_and_array_fields_are_refused(dtype, message):
    with pytest.raises(TypeError, match=message):
        point_sum[1, 1](cuda.to_device(np.zeros(4, dtype)), cuda.device_array(4, np.float64))
