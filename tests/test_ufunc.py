"""numba's @vectorize(target='cuda'): a function of numbers run as an elementwise kernel, against numpy."""

import math

import numpy as np
import pytest

from lapis import cuda
from lapis.numba import vectorize


@vectorize(["int64(int64, int64)", "float32(float32, float32)"], target="cuda")
def add(x, y):
    return x + y


@cuda.vectorize(["float32(float32, float32, float32)"])
def pulses(i, period, amplitude):
    return max(math.sin(i / period) - 0.3, 0.0) * amplitude


def test_host_inputs_broadcast_and_come_back_as_numpy_arrays():
    a, b = np.arange(1, 5), np.arange(10, 50, 10)
    got = add(b[:, np.newaxis], a)                       # numpy's broadcasting: a 4 x 4 table
    assert isinstance(got, np.ndarray) and got.dtype == np.int64 and np.array_equal(got, b[:, None] + a)
    assert np.array_equal(add(a, 100), a + 100)
    halves = add(np.float32([0.5, 1.5]), np.float32([1, 2]))  # the float32 signature, chosen by the inputs' types
    assert halves.dtype == np.float32 and halves.tolist() == [1.5, 3.5]
    out = np.zeros(4, np.int64)
    assert add(a, a, out=out) is out and out.tolist() == [2, 4, 6, 8]


def test_device_inputs_stay_on_the_device():
    t = np.arange(5000, dtype=np.float32)
    want = np.maximum(np.sin(t / np.float32(1000)) - np.float32(0.3), 0) * np.float32(10)
    d = pulses(cuda.to_device(t), 1000.0, 10.0)          # numbers broadcast against a device array
    assert isinstance(d, cuda.DeviceNDArray) and d.shape == t.shape
    np.testing.assert_allclose(d.copy_to_host(), want, atol=1e-5)
    np.testing.assert_allclose(pulses(t, 1000.0, 10.0), want, atol=1e-5)


def test_what_vectorize_refuses():
    with pytest.raises(TypeError, match="needs its signatures"):
        vectorize(target="cuda")(lambda x: x)
    with pytest.raises(NotImplementedError, match="simulated GPU only"):
        vectorize(["float32(float32)"], target="cpu")
    with pytest.raises(TypeError, match="no signature takes inputs of"):
        add(np.array([1 + 2j]), np.array([1 + 2j]))
    with pytest.raises(ValueError, match="device arrays of different shapes"):
        add(cuda.to_device(np.arange(3)), cuda.to_device(np.arange(4)))
