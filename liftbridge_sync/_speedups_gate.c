/*
 * Gate: what a thread blocked in publish() (or on a free slot, a flush) sleeps on, owned
 * by a C struct (its pure-Python twin is liftbridge_sync._publishing.gates.PyGate, with
 * the same interface).
 *
 *   Gate()            closed
 *   gate.wait(timeout=None) -> bool   sleep until opened (True) or the timeout (False)
 *   gate.open()       let the one thread waiting (or the next to wait) through
 *
 * Why not a threading.Lock: a lock released by a thread holding the GIL wakes its
 * waiter straight into the GIL it holds, so the woken thread sleeps once more, on the
 * GIL, and is woken again when it is dropped (a second pair of context switches per
 * publish()). open() releases the gate with the GIL released, so the waiter runs on
 * the other core while the opener takes the GIL back; with eight threads publishing,
 * Python's floor for a wake-up halves (bench/HISTORY.md, 2026-11-27).
 *
 * A gate is one semaphore-like PyThread lock, held while closed. opened is set (under
 * the GIL, before the GIL is dropped) by open() and cleared by the waiter it let
 * through, so that a second open() before that wait is refused as threading.Lock
 * refuses a second release. Free-threaded builds: opened would need an atomic
 * exchange; the PyThread lock itself is a real mutex there as everywhere.
 */
#include "_speedups.h"

#include <time.h>

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock; /* held while the gate is closed */
    char opened;             /* open() ran and its waiter has not come through yet */
} GateObject;

static void
gate_dealloc(GateObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->lock != NULL) {
        /* Released before it is freed: freeing a held lock is undefined on some builds. */
        if (!self->opened)
            PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
gate_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Gate() takes no arguments");
        return NULL;
    }
    GateObject *self = (GateObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    PyThread_acquire_lock(self->lock, WAIT_LOCK); /* a new lock is free: never blocks */
    return (PyObject *)self;
}

/* The wait in microseconds for PyThread_acquire_lock_timed: -1 forever, else >= 0. */
static int
parse_timeout(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PY_TIMEOUT_T *out)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 1 ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                                      "timeout") != 0)) {
        PyErr_SetString(PyExc_TypeError, "wait(timeout=None)");
        return -1;
    }
    *out = -1;
    if (nargs + nkw == 0 || args[0] == Py_None)
        return 0;
    double seconds = PyFloat_AsDouble(args[0]);
    if (seconds == -1.0 && PyErr_Occurred())
        return -1;
    if (!(seconds >= 0)) { /* negative or NaN */
        PyErr_SetString(PyExc_ValueError, "wait: timeout must be None or >= 0");
        return -1;
    }
    double micros = seconds * 1e6;
    *out = micros >= (double)PY_TIMEOUT_MAX ? -1 : (PY_TIMEOUT_T)micros;
    return 0;
}

static double
monotonic_micros(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec * 1e6 + (double)now.tv_nsec / 1e3;
}

static PyObject *
gate_wait(GateObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    PY_TIMEOUT_T timeout;
    if (parse_timeout(args, PyVectorcall_NARGS(nargsf), kwnames, &timeout) < 0)
        return NULL;
    PyLockStatus got = PyThread_acquire_lock_timed(self->lock, 0, 0);
    if (got != PY_LOCK_ACQUIRED && timeout != 0) {
        double deadline = timeout < 0 ? 0 : monotonic_micros() + (double)timeout;
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            got = PyThread_acquire_lock_timed(self->lock, timeout, 1);
            Py_END_ALLOW_THREADS
            if (got != PY_LOCK_INTR)
                break;
            /* A signal: run its handlers (KeyboardInterrupt raises here), then wait on
             * for what is left of the timeout. */
            if (Py_MakePendingCalls() < 0)
                return NULL;
            if (timeout > 0) {
                double left = deadline - monotonic_micros();
                timeout = left > 0 ? (PY_TIMEOUT_T)left : 0;
            }
        }
    }
    if (got != PY_LOCK_ACQUIRED)
        Py_RETURN_FALSE;
    self->opened = 0;
    Py_RETURN_TRUE;
}

static PyObject *
gate_open(GateObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->opened) {
        PyErr_SetString(PyExc_RuntimeError, "Gate.open: already open");
        return NULL;
    }
    self->opened = 1;
    Py_BEGIN_ALLOW_THREADS
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef gate_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))gate_wait, METH_FASTCALL | METH_KEYWORDS,
     "wait(timeout=None) -> bool: sleep (the GIL released) until opened, or False at the "
     "timeout."},
    {"open", (PyCFunction)gate_open, METH_NOARGS,
     "open(): let the waiter through, the GIL released meanwhile; RuntimeError if open."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot gate_slots[] = {
    {Py_tp_doc, "What a blocked publishing thread sleeps on (see _speedups_gate.c)."},
    {Py_tp_new, gate_new},
    {Py_tp_dealloc, gate_dealloc},
    {Py_tp_methods, gate_methods},
    {0, NULL},
};

static PyType_Spec gate_spec = {
    "liftbridge_sync._speedups.Gate",
    sizeof(GateObject),
    0,
    Py_TPFLAGS_DEFAULT,
    gate_slots,
};

LBS_INTERNAL int
add_gate(PyObject *module)
{
    PyObject *type = PyType_FromSpec(&gate_spec);
    if (type == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(module, "Gate", type);
    Py_DECREF(type);
    return rc;
}
