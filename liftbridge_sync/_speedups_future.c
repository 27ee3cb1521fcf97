/*
 * FutureCore: a publish future's state, owned by a C struct (its pure-Python twin is
 * liftbridge_sync._publishing.futures.PyFutureCore, with the same attributes).
 *
 * PublishFuture (Python) derives from it and from concurrent.futures.Future, and keeps
 * every method. The attribute names are the ones concurrent.futures reads (_state,
 * _result, _exception: Future.result(), wait() and as_completed() look at them), plus
 * the publisher's own flags; Python reads and writes them as members, and the C code
 * that resolves futures in bulk (settle_acks, run_callbacks in _speedups.c) works on
 * the struct through future_core() without any attribute lookup.
 *
 * A new one starts RUNNING with no outcome, no callbacks (the empty tuple), no waiter,
 * and no instance dict: that is made only when a thread blocks on it (its _condition
 * and _waiters, created by PublishFuture). The outcome, the state, the callbacks, the
 * ledger and the gate are set under the publisher's callbacks lock (futures._CALLBACKS);
 * the one thread that resolved a future then clears its gate, and a waiter raises the
 * waited/conditioned flags under futures._LAZY. Readers outside a lock (done(), the
 * flags) rely on the order the futures module documents: the state is set before the
 * flags are read, the flags before the state is read. The GIL makes each of those
 * stores whole; on a free-threaded build the flags and the state would need atomic
 * stores and loads (or the callbacks lock) for that order to hold.
 */
#include "_speedups.h"

#include <structmember.h>

LBS_INTERNAL PyTypeObject *future_core_type = NULL;
static PyObject *s_running = NULL;

static PyObject *
future_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    FutureCoreObject *self = (FutureCoreObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->state = Py_NewRef(s_running);
    self->result = Py_NewRef(Py_None);
    self->exception = Py_NewRef(Py_None);
    self->callbacks = Py_NewRef(empty_tuple);
    self->gate = Py_NewRef(Py_None);
    self->ledger = Py_NewRef(Py_None);
    return (PyObject *)self;
}

static int
future_traverse(FutureCoreObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->state);
    Py_VISIT(self->result);
    Py_VISIT(self->exception);
    Py_VISIT(self->callbacks);
    Py_VISIT(self->gate);
    Py_VISIT(self->ledger);
    return 0;
}

static int
future_clear(FutureCoreObject *self)
{
    Py_CLEAR(self->state);
    Py_CLEAR(self->result);
    Py_CLEAR(self->exception);
    Py_CLEAR(self->callbacks);
    Py_CLEAR(self->gate);
    Py_CLEAR(self->ledger);
    return 0;
}

static void
future_dealloc(FutureCoreObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    future_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

#define MEMBER(name, type, field, doc)                                                         \
    {name, type, offsetof(FutureCoreObject, field), 0, doc}

static PyMemberDef future_members[] = {
    MEMBER("_state", T_OBJECT, state, "concurrent.futures' state string (RUNNING, FINISHED)"),
    MEMBER("_result", T_OBJECT, result, "the ack (or None) once resolved"),
    MEMBER("_exception", T_OBJECT, exception, "the typed error once failed, else None"),
    MEMBER("_done_callbacks", T_OBJECT, callbacks,
           "() without callbacks, the callable with one, a list with more"),
    MEMBER("_gate", T_OBJECT, gate, "the Gate of the thread blocked in wait_gated, or None"),
    MEMBER("ledger", T_OBJECT, ledger, "a failure's Unobserved tracker, or None"),
    MEMBER("_waited", T_BOOL, waited, "some thread blocks on it: wake it when resolved"),
    MEMBER("_conditioned", T_BOOL, conditioned, "its _condition and _waiters exist"),
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot future_slots[] = {
    {Py_tp_doc, "A publish future's state (see _speedups_future.c)."},
    {Py_tp_new, future_new},
    {Py_tp_dealloc, future_dealloc},
    {Py_tp_traverse, future_traverse},
    {Py_tp_clear, future_clear},
    {Py_tp_members, future_members},
    {0, NULL},
};

static PyType_Spec future_spec = {
    "liftbridge_sync._speedups.FutureCore",
    sizeof(FutureCoreObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    future_slots,
};

LBS_INTERNAL FutureCoreObject *
future_core(PyObject *obj)
{
    if (future_core_type != NULL && PyObject_TypeCheck(obj, future_core_type))
        return (FutureCoreObject *)obj;
    PyErr_Format(PyExc_TypeError, "expected a publish future, got %.100s",
                 Py_TYPE(obj)->tp_name);
    return NULL;
}

LBS_INTERNAL int
future_finished(FutureCoreObject *future)
{
    if (future->state == s_finished)
        return 1;
    if (future->state == NULL)
        return 0;
    /* A reference of our own: the comparison may run Python code that replaces the state
     * (dropping the future's reference) while CPython still reads the object. */
    PyObject *state = Py_NewRef(future->state);
    int finished = PyObject_RichCompareBool(state, s_finished, Py_EQ);
    Py_DECREF(state);
    return finished;
}

LBS_INTERNAL int
add_future_core(PyObject *module)
{
    s_running = PyUnicode_InternFromString("RUNNING");
    if (s_running == NULL)
        return -1;
    PyObject *type = PyType_FromSpec(&future_spec);
    if (type == NULL)
        return -1;
    future_core_type = (PyTypeObject *)type; /* the module's reference keeps it */
    int rc = PyModule_AddObjectRef(module, "FutureCore", type);
    Py_DECREF(type);
    return rc;
}
