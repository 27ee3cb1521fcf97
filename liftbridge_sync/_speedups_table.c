/*
 * PendingCore: the pending table's state, owned by a C struct (its Python twin is
 * liftbridge_sync._publishing.pending_core.PyPendingCore, with the same interface).
 *
 *   PendingCore(max_in_flight: int, max_message: int, id_prefix: str, clock)
 *
 * It holds the send lock (a lock of its own: acquire(blocking=True) / release() / a
 * context manager), the entries by correlation id (a dict), the deadline queues (a dict
 * of deques by timeout), the live stream, the last sequence number and the next id
 * number, the live stream's outbound queue (an OutboundQueue, _speedups_outbound.c, or
 * None), the owner loop's wake-up time, how many threads are in line for a free slot
 * (in_line: while any are, a new publish takes no slot past them; see
 * liftbridge_sync._publishing.waiting.Waiters), and the closing / finished flags. The Python
 * PendingTable composes one and keeps its methods; the publish_async fast path
 * (submit_plain, _speedups_submit.c) reads and writes the struct directly, under the
 * same lock, taken (never waited for) with try-acquire.
 *
 * The lock is a PyThread lock: it works on every supported version, free-threaded builds
 * included (a PyMutex would do on 3.13+). A blocking acquire() releases the GIL while it
 * waits, so a thread holding the lock while it runs Python code never deadlocks a thread
 * that waits. The counters (next_id) are plain C integers changed with the GIL held; on a
 * free-threaded build next_id() takes the lock, and next_seq() is only called under it.
 * The dicts and deques are built-in objects, safe on their own there.
 */
#include "_speedups.h"

#include <structmember.h>

static int
core_traverse(PendingCoreObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->pending);
    Py_VISIT(self->expiry);
    Py_VISIT(self->live);
    Py_VISIT(self->outbound);
    Py_VISIT(self->clock);
    Py_VISIT(self->prefix);
    return 0;
}

static int
core_clear(PendingCoreObject *self)
{
    Py_CLEAR(self->pending);
    Py_CLEAR(self->expiry);
    Py_CLEAR(self->live);
    Py_CLEAR(self->outbound);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->prefix);
    return 0;
}

static void
core_dealloc(PendingCoreObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    core_clear(self);
    if (self->lock != NULL)
        PyThread_free_lock(self->lock);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
core_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"max_in_flight", "max_message", "id_prefix", "clock", NULL};
    Py_ssize_t max_in_flight, max_message;
    PyObject *prefix, *clock;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nnUO:PendingCore", kwlist, &max_in_flight,
                                     &max_message, &prefix, &clock))
        return NULL;
    if (max_in_flight < 1 || max_message < 0) {
        PyErr_SetString(PyExc_ValueError, "PendingCore: max_in_flight >= 1, max_message >= 0");
        return NULL;
    }
    if (!PyCallable_Check(clock)) {
        PyErr_SetString(PyExc_TypeError, "PendingCore: clock must be callable");
        return NULL;
    }
    PendingCoreObject *self = (PendingCoreObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = PyThread_allocate_lock();
    self->pending = PyDict_New();
    self->expiry = PyDict_New();
    if (self->lock == NULL || self->pending == NULL || self->expiry == NULL) {
        Py_DECREF(self);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    self->live = Py_NewRef(Py_None);
    self->outbound = Py_NewRef(Py_None);
    self->clock = Py_NewRef(clock);
    self->prefix = Py_NewRef(prefix);
    self->max_in_flight = max_in_flight;
    self->max_message = max_message;
    self->seq = 0;
    self->ids = 0;
    self->sleep_until = Py_HUGE_VAL;
    self->in_line = 0;
    self->closing = 0;
    self->finished = 0;
    return (PyObject *)self;
}

static PyObject *
core_acquire(PendingCoreObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    return lbs_lock_acquire(self->lock, args, nargsf, kwnames);
}

static PyObject *
core_release(PendingCoreObject *self, PyObject *Py_UNUSED(ignored))
{
    return lbs_lock_release(self->lock);
}

static PyObject *
core_enter(PendingCoreObject *self, PyObject *Py_UNUSED(ignored))
{
    if (lbs_lock_take(self->lock, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
core_exit(PendingCoreObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return lbs_lock_release(self->lock);
}

static PyObject *
core_locked(PendingCoreObject *self, PyObject *Py_UNUSED(ignored))
{
    return lbs_lock_locked(self->lock);
}

static PyObject *
core_next_seq(PendingCoreObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong(++self->seq);
}

static PyObject *
core_next_id(PendingCoreObject *self, PyObject *Py_UNUSED(ignored))
{
#ifdef Py_GIL_DISABLED
    if (lbs_lock_take(self->lock, 1) < 0)
        return NULL;
    long long n = self->ids++;
    PyThread_release_lock(self->lock);
    return PyLong_FromLongLong(n);
#else
    return PyLong_FromLongLong(self->ids++);
#endif
}

static PyMethodDef core_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))core_acquire, METH_FASTCALL | METH_KEYWORDS,
     "acquire(blocking=True) -> bool: take the send lock."},
    {"release", (PyCFunction)core_release, METH_NOARGS, "release(): let the send lock go."},
    {"locked", (PyCFunction)core_locked, METH_NOARGS, "locked() -> bool: whether it is held."},
    {"__enter__", (PyCFunction)core_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))core_exit, METH_FASTCALL, NULL},
    {"next_seq", (PyCFunction)core_next_seq, METH_NOARGS,
     "next_seq() -> int: the next sequence number (under the lock); seq is it now."},
    {"next_id", (PyCFunction)core_next_id, METH_NOARGS,
     "next_id() -> int: the next correlation id number."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
get_pending(PendingCoreObject *self, void *closure)
{
    return Py_NewRef(self->pending);
}

static PyObject *
get_expiry(PendingCoreObject *self, void *closure)
{
    return Py_NewRef(self->expiry);
}

static PyObject *
get_live(PendingCoreObject *self, void *closure)
{
    return Py_NewRef(self->live);
}

static int
set_live(PendingCoreObject *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "live cannot be deleted (set None)");
        return -1;
    }
    Py_SETREF(self->live, Py_NewRef(value));
    return 0;
}

static PyObject *
get_outbound(PendingCoreObject *self, void *closure)
{
    return Py_NewRef(self->outbound);
}

static int
set_outbound(PendingCoreObject *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "outbound cannot be deleted (set None)");
        return -1;
    }
    Py_SETREF(self->outbound, Py_NewRef(value));
    return 0;
}

static PyObject *
get_clock(PendingCoreObject *self, void *closure)
{
    return Py_NewRef(self->clock);
}

static PyObject *
get_prefix(PendingCoreObject *self, void *closure)
{
    return Py_NewRef(self->prefix);
}

static PyObject *
get_seq(PendingCoreObject *self, void *closure)
{
    return PyLong_FromLongLong(self->seq);
}

static PyObject *
get_max_in_flight(PendingCoreObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->max_in_flight);
}

static PyObject *
get_max_message(PendingCoreObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->max_message);
}

static PyObject *
get_sleep_until(PendingCoreObject *self, void *closure)
{
    return PyFloat_FromDouble(self->sleep_until);
}

static int
set_sleep_until(PendingCoreObject *self, PyObject *value, void *closure)
{
    double v = value == NULL ? -1.0 : PyFloat_AsDouble(value);
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "sleep_until cannot be deleted");
        return -1;
    }
    if (v == -1.0 && PyErr_Occurred())
        return -1;
    self->sleep_until = v;
    return 0;
}

static PyObject *
get_in_line(PendingCoreObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->in_line);
}

static int
set_in_line(PendingCoreObject *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "in_line cannot be deleted");
        return -1;
    }
    Py_ssize_t v = PyLong_AsSsize_t(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0) {
        PyErr_SetString(PyExc_ValueError, "in_line must be >= 0");
        return -1;
    }
    self->in_line = v;
    return 0;
}

static PyObject *
get_flag(PendingCoreObject *self, void *closure)
{
    return PyBool_FromLong(closure == NULL ? self->closing : self->finished);
}

static int
set_flag(PendingCoreObject *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a flag cannot be deleted");
        return -1;
    }
    int v = PyObject_IsTrue(value);
    if (v < 0)
        return -1;
    if (closure == NULL)
        self->closing = (char)v;
    else
        self->finished = (char)v;
    return 0;
}

static PyGetSetDef core_getset[] = {
    {"pending", (getter)get_pending, NULL, "entries by correlation id, in sequence order", NULL},
    {"expiry", (getter)get_expiry, NULL, "deadline queues (deques) by timeout", NULL},
    {"live", (getter)get_live, (setter)set_live, "the stream written to, or None", NULL},
    {"outbound", (getter)get_outbound, (setter)set_outbound,
     "the live stream's OutboundQueue (submit_plain queues on it), or None", NULL},
    {"clock", (getter)get_clock, NULL, NULL, NULL},
    {"id_prefix", (getter)get_prefix, NULL, NULL, NULL},
    {"seq", (getter)get_seq, NULL, "the last sequence number handed out", NULL},
    {"max_in_flight", (getter)get_max_in_flight, NULL, NULL, NULL},
    {"max_message", (getter)get_max_message, NULL, NULL, NULL},
    {"sleep_until", (getter)get_sleep_until, (setter)set_sleep_until,
     "when the owner loop wakes next", NULL},
    {"in_line", (getter)get_in_line, (setter)set_in_line,
     "threads in line for a free slot (while > 0, only they take slots)", NULL},
    {"closing", (getter)get_flag, (setter)set_flag, "no more publishes accepted", NULL},
    {"finished", (getter)get_flag, (setter)set_flag, "pending publishes failed for good",
     (void *)1},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot core_slots[] = {
    {Py_tp_doc, "The pending table's state and its send lock (see _speedups_table.c)."},
    {Py_tp_new, core_new},
    {Py_tp_dealloc, core_dealloc},
    {Py_tp_traverse, core_traverse},
    {Py_tp_clear, core_clear},
    {Py_tp_methods, core_methods},
    {Py_tp_getset, core_getset},
    {0, NULL},
};

static PyType_Spec core_spec = {
    "liftbridge_sync._speedups.PendingCore",
    sizeof(PendingCoreObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    core_slots,
};

LBS_INTERNAL PyTypeObject *pending_core_type = NULL;

LBS_INTERNAL int
add_pending_core(PyObject *module)
{
    PyObject *type = PyType_FromSpec(&core_spec);
    if (type == NULL)
        return -1;
    pending_core_type = (PyTypeObject *)type; /* the module's reference keeps it */
    int rc = PyModule_AddObjectRef(module, "PendingCore", type);
    Py_DECREF(type);
    return rc;
}
