"""Process-level machinery with no knowledge of Liftbridge: fork hooks, timers and waits.

* :mod:`.fork`: ``os.register_at_fork`` hooks for clients.
* :mod:`.scheduler`: the shared ``liftbridge-timer`` thread for subscription timeouts (and
  the watch for whole-stream subscriptions dropped without close()).
* :mod:`.timerwheel`: the hashed timer wheel of the publisher thread.
* :mod:`.own_lock`: a lock of its own with ``threading.Lock``'s methods (the C types' twins).
* :mod:`.doorbell`: an iterating thread's wait for its readers, in slices and without their
  lock, that a signal handler's exception cannot leave broken.
"""
