/*
 * Socket calls of liftbridge_sync._speedups that keep the GIL: send_held and recv_held
 * (described in _speedups.c, with the module's other functions).
 */
#include "_speedups.h"

#include <errno.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/types.h>

/* A file descriptor from a Python int; -1 with an exception set if it is not one. */
static int
socket_fd(PyObject *obj)
{
    long fd = PyLong_AsLong(obj);
    if (fd == -1 && PyErr_Occurred())
        return -1;
    if (fd < 0 || fd > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "not a file descriptor");
        return -1;
    }
    return (int)fd;
}

LBS_INTERNAL PyObject *
send_held(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyLong_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "send_held(fd: int, data: bytes-like)");
        return NULL;
    }
    int fd = socket_fd(args[0]);
    if (fd < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    ssize_t n;
    do {
        n = send(fd, view.buf, (size_t)view.len, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    PyBuffer_Release(&view);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return PyLong_FromLong(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(n);
}

LBS_INTERNAL PyObject *
recv_held(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyLong_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "recv_held(fd: int, size: int)");
        return NULL;
    }
    int fd = socket_fd(args[0]);
    if (fd < 0)
        return NULL;
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    if (size <= 0) {
        PyErr_SetString(PyExc_ValueError, "recv_held: size must be positive");
        return NULL;
    }
    /* Allocate what is there, not size bytes: a buffer of a few hundred KiB comes from
     * mmap() in a thread's malloc arena, and its page faults and unmapping cost ~15 µs
     * per read, most of a read of a few acks. */
    int announced = 0;
    if (ioctl(fd, FIONREAD, &announced) < 0 || announced <= 0) {
        /* Nothing announced: nothing yet, the end of the stream, or data that arrived
         * just now. A small read tells them apart. */
        char small[4096];
        ssize_t got;
        do {
            got = recv(fd, small, sizeof small < (size_t)size ? sizeof small : (size_t)size,
                       MSG_DONTWAIT);
        } while (got < 0 && errno == EINTR);
        if (got < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                Py_RETURN_NONE;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        return PyBytes_FromStringAndSize(small, got);
    }
    Py_ssize_t want = announced < size ? (Py_ssize_t)announced : size;
    PyObject *data = PyBytes_FromStringAndSize(NULL, want);
    if (data == NULL)
        return NULL;
    ssize_t n;
    do {
        n = recv(fd, PyBytes_AS_STRING(data), (size_t)want, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        Py_DECREF(data);
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            Py_RETURN_NONE;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (n != want && _PyBytes_Resize(&data, n) < 0)
        return NULL;
    return data;
}

