"""IRQ steering's rule: held CPUs get no device IRQ, every narrowed mask is recorded and given back as found."""

from __future__ import annotations

from deviceplugin.model.devices import Device, PoolDevices
from deviceplugin.model.irqsteer import (
    DEFAULT,
    Narrowed,
    held_cpus,
    housekeeping,
    steer,
)
from deviceplugin.model.plan import Pool

ONLINE = frozenset(range(8))


def f(*cpus: int) -> frozenset[int]:
    return frozenset(cpus)


def test_an_irq_on_all_cpus_leaves_the_held_ones_and_is_recorded_with_what_it_had():
    plan = steer({"40": ONLINE, DEFAULT: ONLINE}, {}, f(2, 3), ONLINE)
    assert plan.writes == {"40": ONLINE - f(2, 3), DEFAULT: ONLINE - f(2, 3)}
    assert plan.record == {"40": Narrowed(ONLINE, ONLINE - f(2, 3)), DEFAULT: Narrowed(ONLINE, ONLINE - f(2, 3))}


def test_an_irq_only_on_held_cpus_goes_to_the_housekeeping_cpus():
    plan = steer({"41": f(3)}, {}, f(2, 3), f(0, 1))
    assert plan.writes == {"41": f(0, 1)}
    assert plan.record["41"].found == f(3)


def test_an_irq_off_the_held_cpus_is_left_alone_and_not_recorded():
    plan = steer({"42": f(0, 1)}, {}, f(2, 3), ONLINE)
    assert plan.writes == {} and plan.record == {}


def test_freed_cpus_get_the_recorded_mask_back_and_the_record_empties():
    record = {"40": Narrowed(ONLINE, ONLINE - f(2))}
    plan = steer({"40": ONLINE - f(2)}, record, frozenset(), ONLINE)
    assert plan.writes == {"40": ONLINE} and plan.record == {}


def test_a_mask_someone_else_changed_is_theirs_and_is_what_gets_given_back():
    record = {"40": Narrowed(ONLINE, ONLINE - f(2))}
    moved_by_operator = f(2, 5)
    plan = steer({"40": moved_by_operator}, record, f(2), ONLINE)
    assert plan.writes == {"40": f(5)}
    assert plan.record == {"40": Narrowed(moved_by_operator, f(5))}
    assert steer({"40": f(5)}, plan.record, frozenset(), ONLINE).writes == {"40": moved_by_operator}


def test_more_cpus_held_narrows_from_the_mask_found_not_from_the_one_written():
    record = {"40": Narrowed(ONLINE, ONLINE - f(2))}
    plan = steer({"40": ONLINE - f(2)}, record, f(2, 4), ONLINE)
    assert plan.record == {"40": Narrowed(ONLINE, ONLINE - f(2, 4))}


def test_with_every_housekeeping_cpu_held_an_irq_stays_where_it_is():
    plan = steer({"40": f(0, 1)}, {}, f(0, 1), f(0, 1))
    assert plan.writes == {} and plan.record == {}


def test_an_irq_the_kernel_refused_is_skipped_and_keeps_its_record():
    record = {"40": Narrowed(ONLINE, ONLINE - f(2))}
    plan = steer({"40": ONLINE - f(2), "41": ONLINE}, record, frozenset(), ONLINE, skip=frozenset({"40", "41"}))
    assert plan.writes == {} and plan.record == record


def test_an_irq_whose_device_went_away_leaves_the_record():
    plan = steer({}, {"40": Narrowed(ONLINE, ONLINE - f(2))}, f(2), ONLINE)
    assert plan.record == {}


def test_the_record_kept_while_writing_holds_the_old_entries_being_given_back():
    before = {"40": Narrowed(ONLINE, ONLINE - f(2))}
    plan = steer({"40": ONLINE - f(2), "41": ONLINE}, before, f(3), ONLINE)
    ahead = plan.ahead(before)
    assert ahead["40"] == Narrowed(ONLINE, ONLINE - f(3)) and ahead["41"] == Narrowed(ONLINE, ONLINE - f(3))


def test_a_refused_write_keeps_what_was_recorded_and_records_no_first_narrowing():
    before = {"40": Narrowed(ONLINE, ONLINE - f(2))}
    plan = steer({"40": ONLINE - f(2), "41": ONLINE}, before, frozenset(), ONLINE)
    assert plan.writes == {"40": ONLINE}
    assert plan.settled(before, frozenset({"40"})) == before  # the give-back failed: the original stays known
    narrowing = steer({"41": ONLINE}, {}, f(1), ONLINE)
    assert narrowing.settled({}, frozenset({"41"})) == {}


def test_housekeeping_is_the_online_cpus_outside_the_steered_pools_or_all_when_they_take_every_one():
    assert housekeeping(f(0, 1, 2, 3), f(1, 2)) == f(0, 3)
    assert housekeeping(f(0, 1), f(0, 1)) == f(0, 1)


def test_held_cpus_are_the_cpus_of_the_held_devices_of_the_steered_resources_only():
    exclusive = "cmk.intel.com/exclusive-cores"
    devices = {"core-n0-p0-c1": Device("core-n0-p0-c1", f(1, 9), f(0), True)}
    tree = {exclusive: PoolDevices(Pool.EXCLUSIVE, exclusive, devices, {})}
    held = {exclusive: {"core-n0-p0-c1", "cpus-3.11"}, "cmk.intel.com/shared": {"shared-001"}}
    assert held_cpus(tree, held, [exclusive]) == f(1, 9, 3, 11)  # an older release's ID by the CPUs it names
    assert held_cpus(tree, held, []) == frozenset()
