/*
 * EntryCore: one pending publish (its framed request and what resolving it needs),
 * owned by a C struct (its pure-Python twin is
 * liftbridge_sync._publishing.pending.PyEntryCore, with the same constructor and fields).
 *
 *   EntryCore(framed, correlation_id, partition, wants_ack, future, timeout, deadline,
 *             seq=0, resent_at=0.0, key=None)
 *
 * The publisher's Entry (Python) derives from it and adds its methods; the C code that
 * makes entries (new_entry in _speedups.c), numbers them (_speedups_submit.c) and
 * settles them reads and writes the struct through entry_core() without any attribute
 * lookup. An entry's fields are set before it is shared; afterwards seq and resent_at
 * change only under the pending table's send lock, and key is a cache that any reader
 * may fill (with the same value, read from framed).
 */
#include "_speedups.h"

#include <structmember.h>

LBS_INTERNAL PyTypeObject *entry_core_type = NULL;

static int
entry_traverse(EntryCoreObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    for (int f = 0; f < ENTRY_FIELDS; f++)
        Py_VISIT(self->fields[f]);
    return 0;
}

static int
entry_clear(EntryCoreObject *self)
{
    for (int f = 0; f < ENTRY_FIELDS; f++)
        Py_CLEAR(self->fields[f]);
    return 0;
}

static void
entry_dealloc(EntryCoreObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    entry_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
entry_init(EntryCoreObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"framed", "correlation_id", "partition", "wants_ack", "future",
                               "timeout", "deadline", "seq", "resent_at", "key", NULL};
    PyObject *v[ENTRY_FIELDS] = {NULL};
    v[E_SEQ] = zero;
    v[E_RESENT_AT] = zero_float;
    v[E_KEY] = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOO|OOO:EntryCore", keywords,
                                     &v[E_FRAMED], &v[E_CID], &v[E_PARTITION],
                                     &v[E_WANTS_ACK], &v[E_FUTURE], &v[E_TIMEOUT],
                                     &v[E_DEADLINE], &v[E_SEQ], &v[E_RESENT_AT], &v[E_KEY]))
        return -1;
    for (int f = 0; f < ENTRY_FIELDS; f++)
        Py_XSETREF(self->fields[f], Py_NewRef(v[f]));
    return 0;
}

LBS_INTERNAL EntryCoreObject *
entry_core(PyObject *obj)
{
    if (entry_core_type != NULL && PyObject_TypeCheck(obj, entry_core_type))
        return (EntryCoreObject *)obj;
    PyErr_Format(PyExc_TypeError, "expected a pending entry, got %.100s", Py_TYPE(obj)->tp_name);
    return NULL;
}

LBS_INTERNAL PyObject *
entry_get(PyObject *entry, int field)
{
    EntryCoreObject *core = entry_core(entry);
    if (core == NULL)
        return NULL;
    PyObject *value = core->fields[field];
    if (value == NULL)
        PyErr_SetString(PyExc_AttributeError, "a cleared pending entry");
    return Py_XNewRef(value);
}

#define MEMBER(name, field, doc)                                                               \
    {name, T_OBJECT_EX, offsetof(EntryCoreObject, fields) + (field) * sizeof(PyObject *), 0, doc}

static PyMemberDef entry_members[] = {
    MEMBER("framed", E_FRAMED, "the framed PublishRequest (bytes)"),
    MEMBER("correlation_id", E_CID, NULL),
    MEMBER("partition", E_PARTITION, "the partition chosen (the ack does not carry it)"),
    MEMBER("wants_ack", E_WANTS_ACK, "False for AckPolicy.NONE"),
    MEMBER("future", E_FUTURE, "the caller's PublishFuture"),
    MEMBER("timeout", E_TIMEOUT, "seconds the ack may take once sent"),
    MEMBER("deadline", E_DEADLINE, "when the ack is due (the client's clock)"),
    MEMBER("seq", E_SEQ, "the send-order number (0 until entered)"),
    MEMBER("resent_at", E_RESENT_AT, "when it was last re-sent (0.0: never)"),
    MEMBER("key", E_KEY, "(stream, partition) once read from framed, else None"),
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot entry_slots[] = {
    {Py_tp_doc, "One pending publish (see _speedups_entry.c)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, entry_init},
    {Py_tp_dealloc, entry_dealloc},
    {Py_tp_traverse, entry_traverse},
    {Py_tp_clear, entry_clear},
    {Py_tp_members, entry_members},
    {0, NULL},
};

static PyType_Spec entry_spec = {
    "liftbridge_sync._speedups.EntryCore",
    sizeof(EntryCoreObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    entry_slots,
};

LBS_INTERNAL int
add_entry_core(PyObject *module)
{
    PyObject *type = PyType_FromSpec(&entry_spec);
    if (type == NULL)
        return -1;
    entry_core_type = (PyTypeObject *)type; /* the module's reference keeps it */
    int rc = PyModule_AddObjectRef(module, "EntryCore", type);
    Py_DECREF(type);
    return rc;
}
